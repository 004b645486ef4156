"""``fit`` asks for its loaders where Lightning does, among the set-up hooks.

Lightning 2.6 (``Trainer._run``, ``_run_sanity_check``, ``_FitLoop.setup_data``/``on_run_start``): ``setup``,
``configure_model``, ``configure_optimizers``, ``on_fit_start``, then ``val_dataloader()`` inside the sanity check
(after ``on_sanity_check_start``, ``trainer.sanity_checking`` true), ``train_dataloader()`` after it, before
``on_train_start``; ``estimated_stepping_batches`` read earlier asks for ``train_dataloader()`` then, once. The same
module runs under ``lightning.pytorch`` and under steadytrain and the two records are compared; one case also
spells Lightning's sequence out, so it holds without Lightning installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.models import regression_data

MODULE_HOOKS = ("setup", "configure_model", "on_fit_start", "on_train_start", "on_train_end", "on_fit_end")
CALLBACK_HOOKS = ("on_fit_start", "on_sanity_check_start", "on_sanity_check_end", "on_train_start")


def module_class(base: type) -> Any:
    class Recorded(base):  # type: ignore[misc, valid-type]
        def __init__(self, called: list[str], stepping: bool) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)
            self.called, self.stepping = called, stepping
            for name in MODULE_HOOKS:
                object.__setattr__(self, name, self._recorded(name, getattr(self, name)))

        def _recorded(self, name: str, hook: Any) -> Any:
            def record(*args: Any, **kwargs: Any) -> Any:
                self.called.append(name)
                return hook(*args, **kwargs)

            return record

        def train_dataloader(self) -> DataLoader[Any]:
            self.called.append(f"train_dataloader(sanity_checking={self.trainer.sanity_checking})")
            return DataLoader(regression_data(32), batch_size=8)

        def val_dataloader(self) -> DataLoader[Any]:
            self.called.append(f"val_dataloader(sanity_checking={self.trainer.sanity_checking})")
            return DataLoader(regression_data(16, seed=1), batch_size=8)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            self.called.append("configure_optimizers")
            if self.stepping:  # Lightning then asks for train_dataloader() here, and not again
                self.called.append(f"estimated_stepping_batches={self.trainer.estimated_stepping_batches}")
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.net(batch[0])

    return Recorded


def callback_class(base: type) -> Any:
    class RecordedCallback(base):  # type: ignore[misc, valid-type]
        def __init__(self, called: list[str]) -> None:
            for name in CALLBACK_HOOKS:
                setattr(self, name, self._recorded(called, name))

        @staticmethod
        def _recorded(called: list[str], name: str) -> Any:
            def record(trainer: Any, module: Any) -> None:
                called.append(f"Callback.{name}")

            return record

    return RecordedCallback


def record_fit(framework: str, tmp_path: Path, flags: dict[str, Any], stepping: bool = False) -> list[str]:
    """The hooks and loader requests of one fit (with ``resume``: of a fit resumed from an epoch's end)."""
    if framework == "lightning":
        import lightning.pytorch as pl

        module_base, callback_base, trainer_class = pl.LightningModule, pl.Callback, pl.Trainer
    else:
        import trainer as st

        module_base, callback_base, trainer_class = st.Module, st.Callback, st.Trainer
    flags = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 2, **flags}
    resume = flags.pop("resume", False)
    folder = tmp_path / framework
    common = dict(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=folder,
    )  # fmt: skip
    ckpt_path = None
    if resume:
        first = trainer_class(**{**common, **flags})
        first.fit(module_class(module_base)([], False))
        ckpt_path = folder / "epoch0.ckpt"
        first.save_checkpoint(ckpt_path)
        flags["max_epochs"] += 1
    called: list[str] = []
    fit = trainer_class(**{**common, **flags}, callbacks=[callback_class(callback_base)(called)])
    fit.fit(module_class(module_base)(called, stepping), ckpt_path=ckpt_path)
    return called[: called.index("on_train_start") + 1]  # the set-up, up to training


CASES: dict[str, dict[str, Any]] = {
    "sanity_check": {"num_sanity_val_steps": 2},
    "no_sanity_check": {"num_sanity_val_steps": 0},
    "no_validation": {"num_sanity_val_steps": 2, "limit_val_batches": 0},
    "first_epoch_does_not_validate": {"num_sanity_val_steps": 2, "check_val_every_n_epoch": 2, "max_epochs": 2},
    # Lightning also runs the sanity check when it resumes from an epoch's end; steadytrain skips it on any resume
    "resumed": {"num_sanity_val_steps": 0, "resume": True},
}


@pytest.mark.parametrize("stepping", [False, True], ids=["", "estimated_stepping_batches"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_requests_its_loaders_among_the_hooks_where_lightning_does(
    tmp_path: Path, case: str, stepping: bool
) -> None:
    pytest.importorskip("lightning")
    theirs = record_fit("lightning", tmp_path, CASES[case], stepping)
    assert record_fit("steadytrain", tmp_path, CASES[case], stepping) == theirs


def test_the_sanity_check_asks_for_validation_s_loaders_and_training_s_come_after_it(tmp_path: Path) -> None:
    """Lightning's sequence, spelled out (``tests_pytorch/models/test_hooks.py::test_trainer_model_hook_system_fit``):
    no loader is asked for before ``on_fit_start``."""
    assert record_fit("steadytrain", tmp_path, CASES["sanity_check"]) == [
        "setup",
        "configure_model",
        "configure_optimizers",
        "Callback.on_fit_start",
        "on_fit_start",
        "Callback.on_sanity_check_start",
        "val_dataloader(sanity_checking=True)",
        "Callback.on_sanity_check_end",
        "train_dataloader(sanity_checking=False)",
        "Callback.on_train_start",
        "on_train_start",
    ]


def test_estimated_stepping_batches_asks_for_the_training_loader_once(tmp_path: Path) -> None:
    """Read in ``configure_optimizers``: the training loader is asked for then (4 batches, limited to 2), and the
    fit trains on that one."""
    called = record_fit("steadytrain", tmp_path, CASES["sanity_check"], stepping=True)
    assert called[2:5] == [
        "configure_optimizers",
        "train_dataloader(sanity_checking=False)",
        "estimated_stepping_batches=2",
    ]
    assert sum(name.startswith("train_dataloader") for name in called) == 1
