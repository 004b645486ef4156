"""``Tuner(trainer)``: Lightning's ``lr_find`` and ``scale_batch_size`` before a fit.

As Lightning's, each runs the Trainer's stage with a callback in front that runs the search at the stage's
start and then ends the stage (``TunerExit``, a clean end: teardown hooks run, ``on_exception`` does not). The
Trainer is left as after that stage (its DataModule attached, its loaders those of the size found), the module
as it was but for the value tuned, and the random stream where it was: a fit after tuning draws what a fit
without it draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback
from trainer.data.resolve import is_datamodule
from trainer.exceptions import MisconfigurationException, TunerExit
from trainer.seed import isolate_rng
from trainer.tuner.batch_size import check_batch_size_args, check_batch_size_finder, scale_batch_size
from trainer.tuner.lr_finder import LRFinder
from trainer.tuner.lr_search import check_lr_args, lr_attr_name, lr_find

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

METHODS = ("fit", "validate", "test", "predict")


class Tuner:
    """``Tuner(trainer).lr_find(model, ...)`` / ``.scale_batch_size(model, ...)``, as in ``lightning.pytorch.tuner``."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def scale_batch_size(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> int | None:
        """The largest batch size (``batch_arg_name`` on the module, its hparams or the DataModule) whose
        ``steps_per_trial`` steps of ``method`` fit in memory; left set there. None under ``fast_dev_run``."""
        _check_loaders(train_dataloaders, val_dataloaders, dataloaders, method)
        check_batch_size_args(mode, steps_per_trial, init_val, max_trials, margin, max_val)
        trainer = self._trainer
        if trainer.world_size > 1:
            raise MisconfigurationException(
                "Tuning the batch size is currently not supported with distributed strategies."
            )
        _refuse_configured(trainer, "BatchSizeFinder")
        if (train_dataloaders, val_dataloaders, dataloaders) != (None, None, None) and not is_datamodule(
            train_dataloaders
        ):
            raise MisconfigurationException(
                "The Batch size finder cannot be used with dataloaders passed directly to the tuner: each trial asks "
                "for new loaders. Build them in the LightningModule's or the DataModule's *_dataloader() methods from "
                f"self.{batch_arg_name}."
            )
        args = (mode, steps_per_trial, init_val, max_trials, batch_arg_name, margin, max_val)
        search = _Search(
            lambda t, m: scale_batch_size(t, m, *args), lambda t, m: check_batch_size_finder(t, m, batch_arg_name)
        )
        _run(trainer, search, method, model, train_dataloaders, val_dataloaders, dataloaders, datamodule)
        return search.result  # type: ignore[no-any-return]

    def lr_find(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Train ``num_training`` steps with a rising learning rate; with ``update_attr``, set the module's
        ``lr``/``learning_rate`` (or ``attr_name``) to the suggestion. None under ``fast_dev_run``."""
        if method != "fit":
            raise MisconfigurationException("method='fit' is the only valid configuration to run lr finder.")
        _check_loaders(train_dataloaders, val_dataloaders, dataloaders, method)
        check_lr_args(min_lr, max_lr, num_training, mode, early_stop_threshold)
        trainer = self._trainer
        _refuse_configured(trainer, "LearningRateFinder")
        if update_attr and not trainer.fast_dev_run:  # fails before any work, as Lightning's
            lr_attr_name(model, train_dataloaders if is_datamodule(train_dataloaders) else datamodule, attr_name)
        args = (min_lr, max_lr, num_training, mode, early_stop_threshold, update_attr, attr_name)
        search = _Search(lambda t, m: lr_find(t, m, *args))
        _run(trainer, search, "fit", model, train_dataloaders, val_dataloaders, None, datamodule)
        return search.result  # type: ignore[no-any-return]


class _Search(Callback):
    """Runs ``search(trainer, module)`` at the start of the stage, keeps its result and ends the stage;
    ``check(trainer, module)`` runs in ``setup``."""

    def __init__(self, search: Callable[[Any, Any], Any], check: Callable[[Any, Any], None] | None = None) -> None:
        self.search, self.check, self.result = search, check, None

    def setup(self, trainer: Any, pl_module: Any, stage: str | None = None) -> None:
        if self.check is not None:
            self.check(trainer, pl_module)

    def _run(self, trainer: Any, pl_module: Any) -> None:
        self.result = self.search(trainer, pl_module)
        raise TunerExit

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._run(trainer, pl_module)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.state.fn == "validate":
            self._run(trainer, pl_module)

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._run(trainer, pl_module)

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._run(trainer, pl_module)


def _run(
    trainer: Trainer, search: _Search, method: str, model: Module, train: Any, val: Any, loaders: Any, dm: Any
) -> None:
    """``method`` with ``search`` in front of the Trainer's callbacks; the random stream put back afterwards."""
    given = list(trainer.callbacks)
    trainer.set_callbacks([search, *given])
    try:
        with isolate_rng():
            if method == "fit":
                trainer.fit(model, train, val, dm)
            elif method == "predict":
                trainer.predict(model, loaders, datamodule=dm, return_predictions=False)
            else:
                getattr(trainer, method)(model, loaders, datamodule=dm, verbose=False)
    except TunerExit:
        pass
    finally:
        trainer.set_callbacks([cb for cb in trainer.callbacks if cb is not search])


def _refuse_configured(trainer: Trainer, name: str) -> None:
    """The Trainer already runs that search as a callback: Lightning refuses to run it twice."""
    import trainer.callbacks as callbacks  # the finder callbacks hand on this package's searches

    finder = getattr(callbacks, name)
    if any(isinstance(cb, finder) for cb in trainer.callbacks):
        raise MisconfigurationException(
            f"Trainer is already configured with a `{name}` callback. Please remove it if you want to use the Tuner."
        )


def _check_loaders(train: Any, val: Any, dataloaders: Any, method: str) -> None:
    if method not in METHODS:
        raise MisconfigurationException(f"method {method!r} is invalid. Should be one of {METHODS}.")
    if method == "fit" and dataloaders is not None:
        raise MisconfigurationException(
            "In tuner with method='fit', `dataloaders` argument should be None, please consider setting "
            "`train_dataloaders` and `val_dataloaders` instead."
        )
    if method != "fit" and (train is not None or val is not None):
        raise MisconfigurationException(
            f"In tuner with `method`={method!r}, `train_dataloaders` and `val_dataloaders` arguments should be None, "
            "please consider setting `dataloaders` instead."
        )
