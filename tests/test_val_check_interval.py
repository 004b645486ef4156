"""Validation inside the epoch (``val_check_interval``), with Lightning's rules, and what acts on it:
ModelCheckpoint, EarlyStopping, ReduceLROnPlateau; and an exact resume across a due validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, assert_bitwise_equal, loader, params, quiet, regression_data


class Seen(trainer.Callback):
    """(epoch, batches done) at each validation outside the sanity check."""

    def __init__(self) -> None:
        self.at: list[tuple[int, int]] = []

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.at.append((trainer.current_epoch, trainer.batches_done))


def run(tmp_path: Path, batches: int, epochs: int = 2, **flags: Any) -> tuple[Seen, trainer.Trainer]:
    seen = Seen()
    module = flags.pop("module", None) or Regressor()
    fit = quiet(tmp_path, max_epochs=epochs, callbacks=[seen, *flags.pop("callbacks", [])], **flags)
    fit.fit(module, loader(regression_data(8 * batches)), loader(regression_data(16)))
    return seen, fit


@pytest.mark.parametrize(
    ("interval", "every", "expected"),
    [
        (None, 1, [(0, 10), (1, 10)]),  # the default: once, at the epoch end
        (3, 1, [(0, 3), (0, 6), (0, 9), (1, 3), (1, 6), (1, 9)]),  # every 3 batches; not at batch 10
        (0.2, 1, [(0, 2), (0, 4), (0, 6), (0, 8), (0, 10), (1, 2), (1, 4), (1, 6), (1, 8), (1, 10)]),
        (0.3, 1, [(0, 3), (0, 6), (0, 9), (1, 3), (1, 6), (1, 9)]),  # int(10 * 0.3) = 3 batches
        (4, None, [(0, 4), (0, 8), (1, 2), (1, 6), (1, 10)]),  # counted across epochs: batches 4, 8, 12, 16, 20
        (1.0, 2, [(1, 10)]),  # every second epoch
    ],
)
def test_validations_run_where_lightning_runs_them(
    tmp_path: Path, interval: Any, every: int | None, expected: list[tuple[int, int]]
) -> None:
    seen, fit = run(tmp_path, batches=10, val_check_interval=interval, check_val_every_n_epoch=every)
    assert seen.at == expected
    assert fit.fit_loop.progress.validations == len(expected)


def test_an_interval_longer_than_the_epoch_is_refused_unless_counted_across_epochs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"val_check_interval=11 is more than the 10 training batches"):
        run(tmp_path, batches=10, val_check_interval=11)
    seen, _ = run(tmp_path, batches=10, epochs=3, val_check_interval=11, check_val_every_n_epoch=None)
    assert seen.at == [(1, 1), (2, 2)]


@pytest.mark.parametrize("bad", [0, -2, 1.5, 0.0, "often"])
def test_bad_values_name_what_is_valid(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match=rf"val_check_interval={bad!r}"):
        trainer.Trainer(accelerator="cpu", logger=False, val_check_interval=bad)


class Scripted(Regressor):
    """Logs ``score`` from a script, one value per validation, and records the LR each validation sees."""

    def __init__(self, scores: list[float], lr: float = 0.1) -> None:
        super().__init__(lr=lr)
        self.scores = scores
        self.lrs: list[float] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        done = self.trainer.fit_loop.progress.validations  # restored by a resume, unlike an attribute
        self.log("score", self.scores[min(done, len(self.scores) - 1)])

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            scheduler = self.lr_schedulers()
            if scheduler is not None:
                self.lrs.append(scheduler.optimizer.param_groups[0]["lr"])

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": plateau, "monitor": "score", "interval": "step", "frequency": 2},
        }


def test_five_validations_per_epoch_step_a_plateau_scheduler_on_each_score(tmp_path: Path) -> None:
    """The UNet seeds loop: 5 validations per epoch, ReduceLROnPlateau stepped on each validation score."""
    scores = [1.0, 0.9, 0.95, 0.97, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76]  # worse at validations 3, 4, 6, 7, 9, 10
    module = Scripted(scores)
    seen, fit = run(tmp_path, batches=10, val_check_interval=0.2, module=module)
    assert len(seen.at) == 10
    # The LR each on_validation_epoch_end sees is the one before this score's plateau step.
    assert module.lrs == [0.1, 0.1, 0.1, 0.05, 0.025, 0.025, 0.0125, 0.00625, 0.00625, 0.003125]
    assert fit.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0015625)


def test_model_checkpoint_keeps_the_best_of_every_validation_inside_the_epoch(tmp_path: Path) -> None:
    scores = [0.5, 0.2, 0.9, 0.1, 0.7]
    folder = tmp_path / "ckpts"
    cb = trainer.ModelCheckpoint(dirpath=folder, monitor="score", save_top_k=2, filename="{step}-{score:.1f}")
    run(
        tmp_path,
        batches=10,
        epochs=1,
        module=Scripted(scores),
        val_check_interval=0.2,
        callbacks=[cb],
        enable_checkpointing=True,
    )
    assert {p.name for p in folder.glob("*.ckpt")} == {"step=4-score=0.2.ckpt", "step=8-score=0.1.ckpt", "last.ckpt"}
    assert cb.best_model_path == str(folder / "step=8-score=0.1.ckpt")


def test_early_stopping_checks_after_each_validation_and_stops_the_epoch_there(tmp_path: Path) -> None:
    es = trainer.EarlyStopping(monitor="score", patience=1)
    seen, fit = run(
        tmp_path, batches=10, epochs=3, module=Scripted([1.0, 0.5, 0.6, 0.7]), val_check_interval=0.2, callbacks=[es]
    )
    assert seen.at == [(0, 2), (0, 4), (0, 6)]
    assert fit.global_step == 6 and es.stopped_epoch == 0


# ---- an exact resume across a due validation ----------------------------------------------------------
class Dropout(Scripted):
    """Dropout and a scheduler whose LR depends on each validation: a lost or repeated validation shows."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__(scores)
        self.net[2].p = 0.3  # type: ignore[union-attr]


def resumable(tmp_path: Path, ckpt: Path | None = None, monitor: bool = False) -> tuple[Dropout, trainer.Trainer]:
    torch.manual_seed(0)
    module = Dropout([1.0, 0.9, 0.95, 0.97, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76])
    callbacks: list[trainer.Callback] = [
        trainer.ModelCheckpoint(
            dirpath=tmp_path / "steps", filename="{step}", save_top_k=-1, every_n_train_steps=1, save_last=False
        )
    ]
    if monitor:
        callbacks.append(
            trainer.ModelCheckpoint(
                dirpath=tmp_path / "best", monitor="score", save_top_k=-1, filename="{step}", save_last=False
            )
        )
    fit = quiet(tmp_path, max_epochs=2, val_check_interval=0.2, enable_checkpointing=True, callbacks=callbacks)
    fit.fit(module, loader(regression_data(80), shuffle=True), loader(regression_data(16)), ckpt_path=ckpt)
    return module, fit


@pytest.mark.parametrize("step", [2, 3, 10, 14])
def test_resuming_at_a_due_validation_neither_loses_nor_repeats_it(tmp_path: Path, step: int) -> None:
    """Checkpoints at batch end are taken before the validation due after that batch: the resumed run
    runs it first. Steps 2 and 10 are such batches (10 ends epoch 0); 3 and 14 are not."""
    full, full_fit = resumable(tmp_path / "full")
    resumed, fit = resumable(tmp_path / "again", ckpt=tmp_path / "full" / "steps" / f"step={step}.ckpt")
    assert_bitwise_equal(params(resumed), params(full))
    assert fit.fit_loop.progress.validations == full_fit.fit_loop.progress.validations == 10
    assert resumed.lrs == full.lrs[-len(resumed.lrs) :]  # the same plateau decisions after the resume


def test_resuming_from_a_checkpoint_saved_at_validation_end_does_not_repeat_the_validation(tmp_path: Path) -> None:
    full, _ = resumable(tmp_path / "full", monitor=True)
    resumed, fit = resumable(tmp_path / "again", ckpt=tmp_path / "full" / "best" / "step=4.ckpt", monitor=True)
    assert_bitwise_equal(params(resumed), params(full))
    assert fit.fit_loop.progress.validations == 10
    assert len(resumed.lrs) == 10 - 2  # validations 1 and 2 ran before the checkpoint; 8 remain
