"""``LambdaCallback``: a callback made of functions passed by hook name, for one-off hooks."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from trainer.callbacks.base import Callback

HOOK_NAMES = tuple(
    sorted(
        name
        for name, value in vars(Callback).items()
        if inspect.isfunction(value) and (name.startswith("on_") or name in ("setup", "teardown"))
    )
)


class LambdaCallback(Callback):
    """Each keyword is a hook's name and the function to run there, with the hook's arguments
    (``trainer, pl_module, ...``): ``LambdaCallback(on_train_epoch_end=lambda trainer, module: ...)``.

    A name that is not a hook is an error at once (it would otherwise never run); None is ignored.
    """

    def __init__(self, **hooks: Callable[..., Any] | None) -> None:
        unknown = sorted(set(hooks) - set(HOOK_NAMES))
        if unknown:
            what = "is not a hook" if len(unknown) == 1 else "are not hooks"
            raise TypeError(
                f"LambdaCallback got {', '.join(map(repr, unknown))}, which {what}; the hooks are: "
                f"{', '.join(HOOK_NAMES)}."
            )
        for name, function in hooks.items():
            if function is None:
                continue
            if not callable(function):
                raise TypeError(f"LambdaCallback({name}=...) must be callable; got {type(function).__name__}.")
            setattr(self, name, function)
