"""Every hook, in Lightning's order and number: fit with validation, then test, then predict.

The expected lists follow Lightning 2's own hook-order test (``tests_pytorch/models/test_hooks.py``):
each call is recorded when it returns, so a hook that calls others (``optimizer_step`` runs the
closure with ``training_step`` and ``backward``) comes after them. What Lightning records there
that is internal to it (``zero_grad``, ``train``, ``forward``, ``*_dataloader`` calls) is left out.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import quiet, regression_data

MODULE_HOOKS = [
    "configure_callbacks",
    "prepare_data",
    "setup",
    "configure_model",
    "configure_optimizers",
    "on_fit_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_before_batch_transfer",
    "transfer_batch_to_device",
    "on_after_batch_transfer",
    "on_train_batch_start",
    "training_step",
    "on_before_zero_grad",
    "optimizer_zero_grad",
    "on_before_backward",
    "backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "configure_gradient_clipping",
    "clip_gradients",
    "optimizer_step",
    "lr_scheduler_step",
    "on_train_batch_end",
    "on_validation_model_zero_grad",
    "on_validation_model_eval",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "validation_step",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_validation_model_train",
    "on_train_epoch_end",
    "on_save_checkpoint",
    "on_train_end",
    "on_fit_end",
    "teardown",
    "on_test_model_eval",
    "on_test_start",
    "on_test_epoch_start",
    "on_test_batch_start",
    "test_step",
    "on_test_batch_end",
    "on_test_epoch_end",
    "on_test_end",
    "on_test_model_train",
    "on_predict_model_eval",
    "on_predict_start",
    "on_predict_epoch_start",
    "on_predict_batch_start",
    "predict_step",
    "on_predict_batch_end",
    "on_predict_epoch_end",
    "on_predict_end",
]
CALLBACK_HOOKS = [
    "setup",
    "teardown",
    "on_fit_start",
    "on_fit_end",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_validation_start",
    "on_validation_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_start",
    "on_test_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_start",
    "on_predict_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_save_checkpoint",
    "on_load_checkpoint",
    "state_dict",
    "load_state_dict",
]


def recorded(called: list[str], name: str, method: Any) -> Any:
    @functools.wraps(method)
    def record(*args: Any, **kwargs: Any) -> Any:
        out = method(*args, **kwargs)
        called.append(name)
        return out

    return record


class Hooked(trainer.Module):
    def __init__(self, called: list[str]) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        for name in MODULE_HOOKS:
            object.__setattr__(self, name, recorded(called, name, getattr(self, name)))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return {"loss": torch.nn.functional.mse_loss(self.net(x), y)}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self.net(batch[0])

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1)]


class HookedCallback(trainer.Callback):
    def __init__(self, called: list[str]) -> None:
        for name in CALLBACK_HOOKS:
            setattr(self, name, recorded(called, f"Callback.{name}", getattr(self, name)))


def train_batch(automatic: bool, last: bool) -> list[str]:
    if not automatic:
        return [
            "on_before_batch_transfer",
            "transfer_batch_to_device",
            "on_after_batch_transfer",
            "Callback.on_train_batch_start",
            "on_train_batch_start",
            "Callback.on_before_backward",
            "on_before_backward",
            "backward",
            "Callback.on_after_backward",
            "on_after_backward",
            "Callback.on_before_optimizer_step",
            "on_before_optimizer_step",
            "training_step",
            "Callback.on_train_batch_end",
            "on_train_batch_end",
        ]
    return [
        "on_before_batch_transfer",
        "transfer_batch_to_device",
        "on_after_batch_transfer",
        "Callback.on_train_batch_start",
        "on_train_batch_start",
        "training_step",
        "Callback.on_before_zero_grad",
        "on_before_zero_grad",
        "optimizer_zero_grad",
        "Callback.on_before_backward",
        "on_before_backward",
        "backward",
        "Callback.on_after_backward",
        "on_after_backward",
        "Callback.on_before_optimizer_step",
        "on_before_optimizer_step",
        "clip_gradients",
        "configure_gradient_clipping",
        "optimizer_step",
        *(["lr_scheduler_step"] if last else []),
        "Callback.on_train_batch_end",
        "on_train_batch_end",
    ]


def evaluation(stage: str, batches: int, model_eval: str) -> list[str]:
    batch = [
        "on_before_batch_transfer",
        "transfer_batch_to_device",
        "on_after_batch_transfer",
        f"Callback.on_{stage}_batch_start",
        f"on_{stage}_batch_start",
        f"{stage}_step",
        f"Callback.on_{stage}_batch_end",
        f"on_{stage}_batch_end",
    ]
    return [
        f"on_{model_eval}_model_eval",
        f"Callback.on_{stage}_start",
        f"on_{stage}_start",
        f"Callback.on_{stage}_epoch_start",
        f"on_{stage}_epoch_start",
        *batch * batches,
        f"Callback.on_{stage}_epoch_end",
        f"on_{stage}_epoch_end",
        f"Callback.on_{stage}_end",
        f"on_{stage}_end",  # then each submodule's own mode: Hooked only wraps on_<stage>_model_train, as Lightning's
    ]


def stage_start(stage: str) -> list[str]:
    return ["configure_callbacks", "prepare_data", "Callback.setup", "setup", "configure_model"]


def stage_end() -> list[str]:
    return ["Callback.teardown", "teardown"]


def test_fit_with_validation_then_test_then_predict_call_every_hook_in_lightnings_order(tmp_path: Path) -> None:
    called: list[str] = []
    module = Hooked(called)
    fit = quiet(
        tmp_path,
        max_epochs=1,
        num_sanity_val_steps=1,
        enable_checkpointing=True,
        callbacks=[HookedCallback(called), trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=False)],
    )
    data = DataLoader(regression_data(16), batch_size=8)
    fit.fit(module, data, data)
    fit.test(module, data, verbose=False)
    fit.predict(module, data)
    expected = [
        *stage_start("fit"),
        "configure_optimizers",
        "Callback.on_fit_start",
        "on_fit_start",
        "Callback.on_sanity_check_start",
        *evaluation("validation", 1, "validation"),
        "Callback.on_sanity_check_end",
        "Callback.on_train_start",
        "on_train_start",
        "Callback.on_train_epoch_start",
        "on_train_epoch_start",
        *train_batch(True, last=False),
        *train_batch(True, last=True),
        "on_validation_model_zero_grad",
        *evaluation("validation", 2, "validation"),
        "Callback.on_train_epoch_end",
        "on_train_epoch_end",  # before ModelCheckpoint, which monitors what it logs
        "Callback.state_dict",
        "Callback.on_save_checkpoint",
        "on_save_checkpoint",
        "Callback.on_train_end",
        "on_train_end",
        "Callback.on_fit_end",
        "on_fit_end",
        *stage_end(),
        *stage_start("test"),
        *evaluation("test", 2, "test"),
        *stage_end(),
        *stage_start("predict"),
        *evaluation("predict", 2, "predict"),
        *stage_end(),
    ]
    assert called == expected


class HookedManual(Hooked):
    def __init__(self, called: list[str]) -> None:
        super().__init__(called)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        loss = super().training_step(batch, batch_idx)["loss"]
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return {"loss": loss}


def test_manual_optimization_calls_the_backward_and_step_hooks_from_the_module_s_calls(tmp_path: Path) -> None:
    called: list[str] = []
    fit = quiet(tmp_path, max_epochs=1, callbacks=[HookedCallback(called)])
    fit.fit(HookedManual(called), DataLoader(regression_data(16), batch_size=8))
    start = called.index("on_train_epoch_start") + 1
    batches = called[start : called.index("Callback.on_train_epoch_end")]
    assert batches == train_batch(False, last=False) * 2
    assert "lr_scheduler_step" not in called  # manual optimization steps its own schedulers
    assert fit.global_step == 2
