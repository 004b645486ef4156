"""The hyper-parameters the loggers get when fit starts: the module's and the DataModule's saved ones, on global
rank zero, as Lightning logs them; and the module itself, for ``log_graph``. A CLI run's modules save their
config as their hyper-parameters (``trainer.cli``); the whole config goes to ``config.yaml`` and checkpoints, and to
a logger where ``SaveConfigCallback.save_config`` sends it (Lightning's way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView


def log_hyperparams(trainer: TrainerView, module: Module, datamodule: Any) -> None:
    if not trainer.is_global_zero:
        return
    params = logged_hparams(module, datamodule)
    if not trainer.enable_autolog_hparams:  # Trainer(enable_autolog_hparams=False)
        params = {}
    for lg in trainer.loggers:  # a logger shaped as Lightning's, not subclassing ours, may lack the first two
        _call(lg, "start_early")  # as Lightning: wandb's run starts before any TensorBoard writer opens
    for lg in trainer.loggers:
        if params:  # as Lightning: no hparams.yaml when nothing was saved
            lg.log_hyperparams(params)
        _call(lg, "log_graph", module)  # as Lightning: TensorBoardLogger(log_graph=True) draws the module's graph


def _call(logger: Any, name: str, *args: Any) -> None:
    method = getattr(logger, name, None)
    if method is not None:
        method(*args)


def logged_hparams(module: Module, datamodule: Any) -> dict[str, Any]:
    """The module's and the DataModule's hyper-parameters saved by ``save_hyperparameters`` (``logger=False``
    keeps either out; the automatic record stays in checkpoints); a name both hold with different values is an
    error, as in Lightning."""
    state = module._hparams_state()
    logged = _without_cli_keys(module.hparams_initial) if state.log and state.explicit else {}
    saved = getattr(datamodule, "_hparams_state", lambda: None)()
    if saved is None or not (saved.log and saved.explicit):
        return logged
    extra = _without_cli_keys(datamodule.hparams_initial)
    clash = sorted(k for k in logged.keys() & extra.keys() if _differ(logged[k], extra[k]))
    if clash:
        raise RuntimeError(
            f"Error while merging hparams: the keys {clash} are present in both the LightningModule's and "
            f"LightningDataModule's hparams but have different values ({type(module).__name__}'s and "
            f"{type(datamodule).__name__}'s); rename one, or save_hyperparameters(ignore=...) it in one of them."
        )
    return {**logged, **extra}


def _without_cli_keys(hparams: Any) -> dict[str, Any]:
    """The CLI's own record of the class it built (``_class_path``) stays in checkpoints, not in the loggers."""
    return {k: v for k, v in dict(hparams).items() if k != "_class_path"}


def _differ(a: Any, b: Any) -> bool:
    """Lightning's test: another type, another tensor object, or unequal."""
    if type(a) is not type(b):
        return True
    if isinstance(a, torch.Tensor):
        return a is not b
    return bool(a != b)
