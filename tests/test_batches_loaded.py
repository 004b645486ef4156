"""The loops never load a batch they will not run: ``limit_*_batches``, ``max_steps``, ``fast_dev_run``,
``should_stop`` and an epoch's end stop before the next ``next()``. Counted in the dataset's ``__getitem__``
(``num_workers=0``, 4-sample batches) under steadytrain and under Lightning 2.6, whose counts are the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tests.models import every_step_checkpoints, quiet

BATCH = 4


class Counted(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """40 samples (10 batches of 4); counts each sample loaded."""

    def __init__(self, n: int = 40) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)
        self.loads = 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.loads += 1
        return self.x[i], self.y[i]


class CountedStream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """The same samples as a stream without a length: the loader cannot say where an epoch ends."""

    def __init__(self) -> None:
        self.samples = Counted()

    @property
    def loads(self) -> int:
        return self.samples.loads

    def __iter__(self) -> Any:
        return (self.samples[i] for i in range(len(self.samples)))


# scenario: Trainer flags, and what runs after fit (test / predict with their limits)
SCENARIOS: dict[str, dict[str, Any]] = {
    "limit_train_batches": {"max_epochs": 2, "limit_train_batches": 3, "limit_val_batches": 0},
    "max_steps_mid_epoch": {"max_epochs": 3, "max_steps": 5, "limit_val_batches": 0},
    "an_epoch_s_end": {"max_epochs": 2, "limit_val_batches": 0},
    "limit_val_batches": {"max_epochs": 2, "limit_train_batches": 3, "limit_val_batches": 2},
    "fast_dev_run": {"fast_dev_run": 2},
    "should_stop": {"max_epochs": 3, "limit_val_batches": 0, "stop_at": 6},
    "limit_test_and_predict": {"max_epochs": 1, "limit_train_batches": 1, "limit_val_batches": 0,
                               "limit_test_batches": 3, "limit_predict_batches": 2},
    "no_length_limit_train_batches": {"max_epochs": 2, "limit_train_batches": 3, "limit_val_batches": 0,
                                      "stream": True},
}  # fmt: skip


def module_class(base: type) -> Any:
    class Model(base):  # type: ignore[misc, valid-type]
        def __init__(self, stop_at: int | None) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)
            self.stop_at = stop_at

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.stop_at is not None and self.trainer.global_step == self.stop_at:
                self.trainer.should_stop = True

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.net(batch[0])

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.net(batch[0])

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0])  # type: ignore[no-any-return]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Model


def loads(framework: str, tmp_path: Path, flags: dict[str, Any]) -> dict[str, int]:
    """Samples loaded per stage: train, val (sanity check included), test, predict."""
    flags = dict(flags)
    fit: Any
    stop_at, stream = flags.pop("stop_at", None), flags.pop("stream", False)
    if framework == "lightning":
        import lightning.pytorch as pl

        module = module_class(pl.LightningModule)(stop_at)
        fit = pl.Trainer(
            accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp_path / framework, **flags,
        )  # fmt: skip
    else:
        import trainer as st

        module = module_class(st.Module)(stop_at)
        fit = quiet(tmp_path / framework, num_sanity_val_steps=2, **flags)
    data: dict[str, Any] = {stage: Counted() for stage in ("train", "val", "test", "predict")}
    if stream:
        data["train"] = CountedStream()
    loader = {stage: DataLoader(ds, batch_size=BATCH) for stage, ds in data.items()}
    fit.fit(module, loader["train"], loader["val"])
    if "limit_test_batches" in flags:
        fit.test(module, loader["test"], verbose=False)
        fit.predict(module, loader["predict"])
    return {stage: ds.loads for stage, ds in data.items()}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_samples_loaded_are_lightnings(tmp_path: Path, scenario: str) -> None:
    pytest.importorskip("lightning")
    theirs = loads("lightning", tmp_path, SCENARIOS[scenario])
    assert loads("steadytrain", tmp_path, SCENARIOS[scenario]) == theirs


def test_limit_train_batches_loads_only_the_batches_trained_on(tmp_path: Path) -> None:
    """The count issue 27 found (32 samples where Lightning loads 24), without Lightning installed."""
    counted = loads("steadytrain", tmp_path, SCENARIOS["limit_train_batches"])
    assert counted == {"train": 3 * BATCH * 2, "val": 0, "test": 0, "predict": 0}


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_resumed_epoch_loads_only_its_remaining_batches(tmp_path: Path, shuffle: bool) -> None:
    """Resumed after 1 of 3 batches: the finished one is skipped by index, never loaded (2 + 3 batches)."""
    import trainer as st

    def run(ckpt: Path | None) -> int:
        data = Counted()
        save = every_step_checkpoints(tmp_path / "ckpts")
        fit = quiet(tmp_path, max_epochs=2, limit_train_batches=3, enable_checkpointing=True, callbacks=[save])
        fit.fit(module_class(st.Module)(None), DataLoader(data, batch_size=BATCH, shuffle=shuffle), ckpt_path=ckpt)
        return data.loads

    assert run(None) == 2 * 3 * BATCH
    assert run(tmp_path / "ckpts" / "step1.ckpt") == (2 + 3) * BATCH
