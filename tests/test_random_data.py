"""Same math when the data is random (issue 21, section 2), and Lightning's draws on one device.

The rule: one device without workers draws exactly as a hand-written loop (and Lightning) does; as
soon as samples are drawn in workers or on several ranks, a sample's draws depend only on the seed,
the epoch and its index. Several ranks split one device's shuffle, interleaved like
``DistributedSampler``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

import trainer
from tests.helpers import REPO_ROOT, run_python
from tests.models import NoisyDataset, Regressor, assert_bitwise_equal, loader, params, quiet, regression_data
from trainer.data.position import ReshardedBatches
from trainer.data.sample_seeds import seed_samples
from trainer.data.shuffle import SharedShuffle

SCRIPT = REPO_ROOT / "tests" / "scripts" / "reshard_job.py"


def test_shared_shuffle_is_random_samplers_order_after_the_same_single_draw() -> None:
    data = list(range(23))
    for_one_device, shared = [], []
    for sampler, out in ((RandomSampler(data), for_one_device), (SharedShuffle(data), shared)):
        torch.manual_seed(4)
        out.extend([list(sampler), list(sampler), torch.randn(2).tolist()])  # two epochs, then the stream
    assert for_one_device == shared
    assert for_one_device[0] != for_one_device[1]


def test_shared_shuffle_takes_rank_zeros_seed() -> None:
    data = list(range(10))
    torch.manual_seed(1)
    rank0 = list(RandomSampler(data))
    torch.manual_seed(2)  # another stream on this rank
    assert list(SharedShuffle(data, agree=lambda _: _seed_drawn_after(1))) == rank0


def _seed_drawn_after(seed: int) -> int:
    generator = torch.Generator().manual_seed(seed)
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


@pytest.mark.parametrize(("old_world", "new_world"), [(2, 1), (1, 2), (2, 4)])
def test_a_reshard_interleaves_like_a_distributed_sampler(old_world: int, new_world: int) -> None:
    """Sequential data, global batch 8: new rank r gets items r, r+W, ... of one device's batch."""
    old = {"world_size": old_world, "batch_size": 8 // old_world, "drop_last": False}
    shares = [list(ReshardedBatches(SequentialSampler(range(16)), old, new_world, r)) for r in range(new_world)]
    for batch in (0, 1):
        assert [share[batch] for share in shares] == [
            list(range(8 * batch + r, 8 * (batch + 1), new_world)) for r in range(new_world)
        ]


def test_several_ranks_without_workers_seed_each_sample_and_leave_the_models_stream() -> None:
    """Per-sample draws equal those made in workers; the default generator is as a plain loader leaves it."""
    data = NoisyDataset(regression_data(12))
    batches = BatchSampler(SequentialSampler(data), 4, False)

    def keyed(workers: int) -> list[torch.Tensor]:
        loader = seed_samples(DataLoader(data, batch_size=4, num_workers=workers), 7, several_ranks=True)
        loader.batch_sampler.sampler.set_epoch(1)  # type: ignore[union-attr]
        return [x for x, _ in loader]

    torch.manual_seed(0)
    in_main = keyed(0)
    after_keyed = torch.randn(3)
    torch.manual_seed(0)
    list(DataLoader(regression_data(12), batch_size=4))  # the same iter() draw, no per-sample draws
    assert torch.equal(after_keyed, torch.randn(3))
    assert_bitwise_equal(in_main, keyed(1))
    unseeded = [torch.stack([data[i][0] for i in batch]) for batch in batches]
    assert not torch.equal(in_main[0], unseeded[0])


def test_one_device_without_workers_keeps_the_users_loader() -> None:
    loader = DataLoader(NoisyDataset(regression_data(8)), batch_size=4, shuffle=True)
    assert seed_samples(loader, 7) is loader
    tensors = DataLoader(regression_data(8), batch_size=4, num_workers=1)
    assert seed_samples(tensors, 7, several_ranks=True) is tensors  # a TensorDataset draws nothing


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[torch.Tensor]]:
    """Final weights of ``reshard_job.py`` runs (128 noisy samples, shuffled, 2 epochs, global batch 32,
    a checkpoint at every step), each run once per module."""
    folder, done = tmp_path_factory.mktemp("runs"), {}

    def run(devices: int, workers: int, resume: tuple[int, int, int] | None = None) -> list[torch.Tensor]:
        name = f"{devices}x{32 // devices}w{workers}" + (f"-from-{resume}" if resume else "")
        if name not in done:
            flags = ["--devices", str(devices), "--workers", str(workers), "--noise", "--shuffle", "--epochs", "2"]
            if resume is not None:
                run(resume[0], resume[1])
                source = folder / f"{resume[0]}x{32 // resume[0]}w{resume[1]}"
                flags += ["--resume", str(source / "ckpts" / f"step={resume[2]}.ckpt")]
            out = run_python([str(SCRIPT), str(folder / name), *flags], timeout=240)
            assert out.returncode == 0, out.output
            done[name] = torch.load(folder / name / "final-rank0.pt", weights_only=True)
        return done[name]

    return run


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("devices", "workers", "resume"),
    [
        (1, 1, None),  # 1 x 32, num_workers=2 vs num_workers=1
        (2, 2, None),  # 1 x 32 vs 2 x 16, num_workers=2
        (2, 1, None),  # 1 x 32 (num_workers=2) vs 2 x 16 (num_workers=1)
        (2, 0, None),  # 1 x 32 (num_workers=2) vs 2 x 16 (num_workers=0)
        (1, 2, (2, 2, 6)),  # 2 x 16 resumed mid-epoch (step 6 of 8) on 1 x 32, num_workers=2
        (2, 0, (1, 2, 3)),  # 1 x 32 (workers) resumed mid-epoch (step 3) on 2 x 16 without workers
    ],
)
def test_the_issues_table_random_data_agrees_with_one_device_and_workers(
    runs: Callable[..., list[torch.Tensor]], devices: int, workers: int, resume: tuple[int, int, int] | None
) -> None:
    """Issue 21's table: every run within 1e-5 of 1 x 32 with num_workers=2 (float summation order)."""
    assert max_diff(runs(1, 2), runs(devices, workers, resume)) <= 1e-5


@pytest.mark.slow
def test_one_device_without_workers_draws_from_the_default_generator(runs: Callable[..., list[torch.Tensor]]) -> None:
    """As Lightning and a hand-written loop: other augmentations than per-sample seeds give, by design."""
    assert max_diff(runs(1, 2), runs(1, 0)) > 1e-3


class SaveAt(trainer.Callback):
    """Saves a checkpoint in ``hook`` of epoch 0 (after epoch 0's iterator exists, before its first batch)."""

    def __init__(self, hook: str, path: Path) -> None:
        self.path = path
        setattr(self, hook, self._save)

    def _save(self, fit: trainer.Trainer, module: Any) -> None:
        torch.rand(1)  # the hook draws before the save: a resume continues after this draw
        if fit.current_epoch == 0 and not self.path.exists():
            fit.save_checkpoint(self.path)


@pytest.mark.parametrize("hook", ["on_train_start"])
def test_a_checkpoint_taken_before_the_first_batch_resumes_exactly(tmp_path: Path, hook: str) -> None:
    """Epoch 0's iterator is created before ``on_train_start`` (Lightning's point): a checkpoint taken
    between then and the first batch must not draw its base seed twice."""
    data = NoisyDataset(regression_data(32))
    ckpt = tmp_path / "early.ckpt"
    results = []
    for path in (None, ckpt):
        torch.manual_seed(3)
        module = Regressor(dropout=0.3)
        fit = quiet(tmp_path, max_epochs=2, callbacks=[SaveAt(hook, ckpt)])
        fit.fit(module, loader(data, shuffle=True), ckpt_path=path)
        results.append(params(module))
    assert ckpt.is_file()
    assert_bitwise_equal(results[0], results[1])


@pytest.mark.parametrize("sanity_steps, order", [(2, ["val", "train"]), (0, ["train", "val"])])
def test_before_a_sanity_check_the_validation_loader_is_asked_first_and_its_draws_undone(
    tmp_path: Path, sanity_steps: int, order: list[str]
) -> None:
    """Lightning asks for the validation loader inside its sanity check, whose random draws it undoes, and for
    the training loader after it; without a sanity check, for the validation loader before ``on_train_start``, after
    the first epoch's iterator drew its base seed. A DataModule drawing in both hooks gets Lightning's numbers (checked
    against Lightning 2.6.6)."""
    calls: list[tuple[str, float]] = []

    class Drawing(trainer.DataModule):
        def train_dataloader(self) -> DataLoader[Any]:
            calls.append(("train", torch.rand(1).item()))
            return loader(regression_data(16), batch_size=8)

        def val_dataloader(self) -> DataLoader[Any]:
            calls.append(("val", torch.rand(1).item()))
            return loader(regression_data(16), batch_size=8)

    model = Regressor()
    torch.manual_seed(0)
    first = torch.rand(1).item()
    torch.empty((), dtype=torch.int64).random_()  # the training iterator's base seed
    after_the_iterator = torch.rand(1).item()
    torch.manual_seed(0)
    quiet(tmp_path, max_epochs=1, num_sanity_val_steps=sanity_steps).fit(model, datamodule=Drawing())
    assert [name for name, _ in calls] == order
    assert [draw for _, draw in calls] == ([first, first] if sanity_steps else [first, after_the_iterator])
