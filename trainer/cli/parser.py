"""The CLI's parser: jsonargparse's ``ArgumentParser`` plus the methods LightningCLI scripts call on it.

Named like Lightning's ``LightningArgumentParser`` without the prefix (as ``Module`` is to
``LightningModule``), so a port changes only its import line:
``from trainer.cli import ArgumentParser as LightningArgumentParser``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NoReturn

import jsonargparse
from jsonargparse import class_from_function
from torch.optim import Optimizer

from trainer.callbacks.base import Callback
from trainer.cli.help_text import plain_help, set_registry_help
from trainer.cli.optimizers import AUTOMATIC, LRSchedulerTypeTuple, with_class_path
from trainer.datamodule import DataModule
from trainer.lightning_paths import port_class_paths
from trainer.loggers import csv, mlflow, tensorboard, wandb  # noqa: F401  (so `class_path: CSVLogger` resolves)
from trainer.module import Module
from trainer.trainer import Trainer

_BUILDABLE = (Trainer, Module, DataModule, Callback)


def _load_callbacks() -> None:
    """Import every callback (``trainer.callbacks`` loads most on first use), so a short name such as
    ``--trainer.callbacks=DeviceStatsMonitor`` resolves: jsonargparse finds a name among the imported subclasses."""
    import trainer.callbacks as callbacks

    for name in callbacks._LAZY:
        with contextlib.suppress(ImportError):  # an optional package (rich) is missing: that one cannot be named
            getattr(callbacks, name)


_load_callbacks()
ClassGroups = dict[str, tuple[type | tuple[type, ...], str]]


class ArgumentParser(jsonargparse.ArgumentParser):
    """Adds ``add_lightning_class_args``, ``add_optimizer_args`` and ``add_lr_scheduler_args``.

    ``env_prefix="PL"`` as in Lightning: with ``default_env=True``, ``PL_TRAINER__MAX_EPOCHS=3`` sets
    ``--trainer.max_epochs`` (environment parsing stays off by default).
    """

    def __init__(
        self,
        *args: Any,
        description: str = "steadytrain command line",
        env_prefix: str = "PL",
        default_env: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []  # groups built into callbacks that the CLI adds to the Trainer
        self.optimizers: ClassGroups = {}  # key -> (optimizer class(es), link_to)
        self.lr_schedulers: ClassGroups = {}

    def parse_args(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """jsonargparse's, with Lightning's class paths read as steadytrain's (``trainer/lightning_paths.py``)."""
        import sys

        given = sys.argv[1:] if args is None else args
        if isinstance(given, list | tuple):
            given = [port_class_paths(a) if isinstance(a, str) else a for a in given]
        return super().parse_args(given, *rest, **kwargs)

    def parse_string(self, content: str, *rest: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """A config file's text (``--config``), with Lightning's class paths read as steadytrain's."""
        return super().parse_string(port_class_paths(content), *rest, **kwargs)

    def add_lightning_class_args(
        self,
        lightning_class: type | Callable[..., Any],
        nested_key: str,
        subclass_mode: bool = False,
        required: bool = True,
    ) -> list[str]:
        """Add a Trainer, Module, DataModule or Callback (or a function returning one) under ``nested_key``.

        A callback group is built and added to the Trainer's callbacks, so a script can expose one
        callback's settings as ``--early_stopping.patience``. Returns the keys added.
        """
        if callable(lightning_class) and not isinstance(lightning_class, type):
            lightning_class = class_from_function(lightning_class)
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, _BUILDABLE)):
            raise TypeError(
                f"add_lightning_class_args takes a subclass of Trainer, Module, DataModule or Callback (or a "
                f"function returning one); got {lightning_class!r}."
            )
        if issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            self.add_subclass_arguments(lightning_class, nested_key, fail_untyped=False, required=required)
            return [nested_key]
        # The Trainer is built by the CLI itself: its callbacks get the CLI's own ones added first.
        instantiate = not issubclass(lightning_class, Trainer)
        added = self.add_class_arguments(
            lightning_class, nested_key, fail_untyped=False, instantiate=instantiate, sub_configs=True
        )
        if issubclass(lightning_class, Trainer):
            set_registry_help(self, nested_key)
        return added

    def add_optimizer_args(
        self,
        optimizer_class: type[Optimizer] | tuple[type[Optimizer], ...] = (Optimizer,),
        nested_key: str = "optimizer",
        link_to: str = AUTOMATIC,
    ) -> None:
        """Add an optimizer group (a tuple: any subclass, chosen by name); built on the model's parameters.

        ``link_to="AUTOMATIC"``: the CLI replaces ``configure_optimizers``; else the group's
        ``{"class_path", "init_args"}`` goes to that key (e.g. ``"model.optimizer_init"``).
        """
        self._add_group(optimizer_class, nested_key, "params")
        self.optimizers[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(
        self,
        lr_scheduler_class: type | tuple[type, ...] = LRSchedulerTypeTuple,
        nested_key: str = "lr_scheduler",
        link_to: str = AUTOMATIC,
    ) -> None:
        """Add an LR scheduler group, built on the optimizer; ``link_to`` as in ``add_optimizer_args``."""
        self._add_group(lr_scheduler_class, nested_key, "optimizer")
        self.lr_schedulers[nested_key] = (lr_scheduler_class, link_to)

    def link_optimizers_and_lr_schedulers(self) -> None:
        """Link each group registered with a ``link_to`` key (not AUTOMATIC) to that key."""
        for key, (classes, link_to) in {**self.optimizers, **self.lr_schedulers}.items():
            if link_to != AUTOMATIC:
                self.link_arguments(key, link_to, compute_fn=_class_path_adder(classes))

    def format_help(self, formatter: Any = None) -> str:
        """The help with docstring markup (double backquotes, ``:class:`` roles) shown as plain text."""
        plain_help(self)
        return str(super().format_help(formatter))

    def usage_error(self, what: str, err: BaseException) -> NoReturn:
        """Report through the parser (usage, one line, exit 2), not as a traceback."""
        self.error(f"{what}: {type(err).__name__}: {err}")

    def _add_group(self, classes: type | tuple[type, ...], nested_key: str, built_on: str) -> None:
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {built_on}}
        if isinstance(classes, tuple):
            self.add_subclass_arguments(classes, nested_key, **kwargs)
        else:
            self.add_class_arguments(classes, nested_key, sub_configs=True, **kwargs)


def _class_path_adder(classes: type | tuple[type, ...]) -> Callable[[Any], dict[str, Any] | None]:
    def add_class_path(init: Any) -> dict[str, Any] | None:
        return with_class_path(classes, init)

    return add_class_path
