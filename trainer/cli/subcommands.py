"""The CLI's subcommands, as LightningCLI defines them: each is a Trainer method, and its arguments (less the ones
the CLI fills itself: the model, the loaders, the datamodule) become the subcommand's flags, so ``test --verbose
false`` or ``fit --ckpt_path last`` reach the method, and a subclass adds a subcommand by naming a method of its
Trainer in ``subcommands()``."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# subcommand -> the method's arguments the CLI passes itself (not flags)
DEFAULT_SUBCOMMANDS: dict[str, set[str]] = {
    "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
    "validate": {"model", "dataloaders", "datamodule"},
    "test": {"model", "dataloaders", "datamodule"},
    "predict": {"model", "dataloaders", "datamodule"},
}


def short_description(method: Callable[..., Any]) -> str | None:
    """The first line of the method's docstring: the subcommand's help."""
    doc = inspect.getdoc(method)
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else None


def starts_with_subcommand(args: Any, names: Iterable[str]) -> bool:
    """Command-line style ``args`` (``sys.argv`` when None) whose first word is a subcommand."""
    argv = sys.argv[1:] if args is None else args
    return isinstance(argv, list) and bool(argv) and argv[0] in set(names)


def checkpoint_model_config(ckpt_path: Any) -> dict[str, Any] | None:
    """The model's config in a ``--ckpt_path`` file's hyper-parameters (a CLI run's: with ``class_path`` when it
    saved one), or None when there is no such file or it saved none."""
    if not ckpt_path or not Path(ckpt_path).is_file():
        return None
    from trainer.checkpoint import load_checkpoint

    hparams = dict(load_checkpoint(ckpt_path).get("hyper_parameters") or {})
    hparams.pop("_instantiator", None)
    if not hparams:
        return None
    if "_class_path" in hparams:
        return {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
    return hparams


def call_if_defined(cli: Any, name: str) -> None:
    """``cli.<name>()`` where the CLI (a subclass) defines it: ``before_fit`` and the like are optional."""
    hook = getattr(cli, name, None)
    if callable(hook):
        hook()
