"""Building the CLI's model and datamodule so that they save their config as hyper-parameters (Lightning's
dependency injection), and Lightning's import path ``cli.instantiate_module`` (the function that rebuilds them from a
checkpoint lives in ``trainer.checkpoint.instantiate``)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from trainer.checkpoint.instantiate import instantiate_module
from trainer.hparams import given_hyperparameters

if TYPE_CHECKING:
    from trainer.cli.core import CLI

__all__ = ["INSTANTIATOR", "Instantiator", "built_type", "instantiate_module"]

# Lightning's name for the rebuilding function: a checkpoint written here loads under Lightning too (and ours reads
# it as trainer.cli.instantiate_module: trainer/checkpoint/rebuild.py)
INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"


class Instantiator:
    """Builds the CLI's ``key`` object with its config as the hyper-parameters it saves."""

    def __init__(self, cli: CLI, key: str) -> None:
        self.cli, self.key = cli, key

    def __call__(self, class_type: type, *args: Any, applied_instantiation_links: dict[str, Any], **kwargs: Any) -> Any:
        hparams = self.cli._hparams_source.get(self.key) or {}
        if "class_path" in hparams:  # the same keys whatever the subclass mode; the class under a key of its own
            hparams = {
                "_class_path": hparams["class_path"],
                **(hparams.get("init_args") or {}),
                **(hparams.get("dict_kwargs") or {}),
            }
        for key, value in applied_instantiation_links.items():  # values linked at instantiation, known only now
            if key.startswith(f"{self.key}."):
                set_nested(hparams, key[len(self.key) + 1 :].removeprefix("init_args."), value)
        with given_hyperparameters(hparams, INSTANTIATOR):
            return class_type(*args, **kwargs)


def set_nested(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[last] = value


def built_type(built: Any, base: type) -> type:
    """What a ``model_class``/``datamodule_class`` builds: itself, a builder function's return type, or the base."""
    if built is None:
        return base
    if callable(built) and not isinstance(built, type):
        returned = inspect.signature(built).return_annotation
        return returned if isinstance(returned, type) else base
    return built  # type: ignore[no-any-return]
