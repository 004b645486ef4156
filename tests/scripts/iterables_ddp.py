"""Plain iterables as loaders on 2 real ranks (self-launched): refused unless the user shards them.

    python iterables_ddp.py OUT_DIR train|val|predict|opted-out

The first three pass a plain list or iterable where the Trainer would have to shard, and must fail on
every rank before any batch runs; ``opted-out`` predicts with ``use_distributed_sampler=False`` and
saves what this rank predicted to ``OUT_DIR/predicted-rank<r>.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tests.models import quiet, regression_data
from tests.test_iterables import Evaluated, Stream, batches, loader


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    fit = quiet(out, strategy="ddp", devices=2, max_epochs=1)
    module = Evaluated()
    if mode == "train":
        fit.fit(module, Stream(batches(16)))
    elif mode == "val":
        fit.fit(module, loader(regression_data(16)), [batches(16)])
    elif mode == "predict":
        fit.predict(module, [loader(regression_data(8)), batches(8)])
    else:
        opted_out = quiet(out, strategy="ddp", devices=2, use_distributed_sampler=False)
        predicted = opted_out.predict(module, Stream(batches(16)))
        torch.save(predicted, out / f"predicted-rank{opted_out.global_rank}.pt")
    print(f"rank {fit.global_rank} finished", flush=True)


if __name__ == "__main__":
    main()
