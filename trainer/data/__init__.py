"""What the loops need from data: batches on the device, loaders sharded across ranks, exact resume.

Loaders are rebuilt as plain ``DataLoader`` objects from their public settings (never by patching
``__init__``); a DataLoader subclass therefore loses its own extra behaviour when it is resharded.
One process always gets the user's loader back untouched, so a run matches a hand-written loop.
Any other iterable of batches (a list, a custom class) is used as it is: it has no sampler to
shard or skip by index, so several ranks need it sharded by the user, and a resume reads past
its finished batches.
"""

from trainer.data.loaders import count_batches, has_len, num_batches, set_epoch, shut_down_workers
from trainer.data.resume import capture_epoch_rng, restore_epoch_rng, skip_batches, start_persistent_workers
from trainer.data.sample_seeds import seed_samples
from trainer.data.sharding import (
    DistributedSamplerWrapper,
    EvalShardSampler,
    check_shardable,
    prepare_eval_loader,
    prepare_train_loader,
    unshuffled,
)

__all__ = [
    "DistributedSamplerWrapper",
    "EvalShardSampler",
    "capture_epoch_rng",
    "check_shardable",
    "count_batches",
    "has_len",
    "num_batches",
    "prepare_eval_loader",
    "prepare_train_loader",
    "restore_epoch_rng",
    "seed_samples",
    "set_epoch",
    "shut_down_workers",
    "skip_batches",
    "start_persistent_workers",
    "unshuffled",
]
