"""A checkpoint written when a stage fails: ``OnExceptionCheckpoint`` and ``ModelCheckpoint(save_on_exception=True)``,
as Lightning's (issue 34)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, regression_data
from trainer.callbacks import Checkpoint, ModelCheckpoint, OnExceptionCheckpoint
from trainer.exceptions import MisconfigurationException


class FailsAtStep(Regressor):
    def __init__(self, at: int = 3) -> None:
        super().__init__()
        self.at = at

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.trainer.global_step == self.at:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def fit(tmp_path: Path, module: Regressor, callbacks: list[Any], **kwargs: Any) -> trainer.Trainer:
    run = trainer.Trainer(
        default_root_dir=tmp_path, max_epochs=2, callbacks=callbacks, logger=False, enable_progress_bar=False, **kwargs
    )
    run.fit(module, loader(regression_data(32), batch_size=8))
    return run


def test_a_failed_fit_leaves_its_state_and_it_resumes(tmp_path: Path) -> None:
    callback = OnExceptionCheckpoint(tmp_path / "crash")
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, FailsAtStep(at=3), [callback])
    saved = torch.load(callback.ckpt_path, weights_only=True)
    assert callback.ckpt_path == str(tmp_path / "crash" / "on_exception.ckpt") and saved["global_step"] == 3
    resumed = trainer.Trainer(default_root_dir=tmp_path, max_epochs=2, logger=False, enable_progress_bar=False)
    resumed.fit(Regressor(), loader(regression_data(32), batch_size=8), ckpt_path=callback.ckpt_path)
    assert resumed.global_step == 8


def test_a_fit_that_ends_well_removes_an_earlier_failures_file(tmp_path: Path) -> None:
    callback = OnExceptionCheckpoint(tmp_path, filename="crash")
    (tmp_path / "crash.ckpt").write_bytes(b"an earlier failure's")
    fit(tmp_path, Regressor(), [callback])
    assert not (tmp_path / "crash.ckpt").exists()
    with pytest.raises(ValueError, match="filename cannot be empty"):
        OnExceptionCheckpoint(tmp_path, filename="")


def test_a_checkpoint_callback_stands_in_for_the_default_one(tmp_path: Path) -> None:
    """Lightning's rule: any Checkpoint in callbacks= means no default ModelCheckpoint (and no last.ckpt)."""
    run = fit(tmp_path, Regressor(), [OnExceptionCheckpoint(tmp_path / "crash")])
    assert not any(isinstance(cb, ModelCheckpoint) for cb in run.callbacks)
    assert isinstance(run.callbacks[-1], Checkpoint)  # checkpointing callbacks run last
    with pytest.raises(MisconfigurationException, match="enable_checkpointing=False contradicts the OnException"):
        trainer.Trainer(enable_checkpointing=False, callbacks=[OnExceptionCheckpoint(tmp_path)])


def test_model_checkpoint_saves_on_exception_when_asked(tmp_path: Path) -> None:
    saver = ModelCheckpoint(tmp_path / "ckpt", filename="{step}", save_on_exception=True, every_n_epochs=10)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, FailsAtStep(at=5), [saver])
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["last.ckpt", "step=5.ckpt"]
    assert torch.load(tmp_path / "ckpt" / "step=5.ckpt", weights_only=True)["global_step"] == 5
    quiet_saver = ModelCheckpoint(tmp_path / "quiet", every_n_epochs=10)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, FailsAtStep(at=5), [quiet_saver])
    assert not (tmp_path / "quiet").exists() or not list((tmp_path / "quiet").glob("*.ckpt"))
