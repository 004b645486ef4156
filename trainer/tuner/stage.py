"""The stage a search runs in (``fit``, ``validate``, ``test`` or ``predict``): its loaders, read before the
search and requested again after it, so the stage goes on with the batch size found (Lightning's
``_reset_dataloaders``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.data.loaders import shut_down_workers
from trainer.data.resolve import resolve_loaders
from trainer.exceptions import MisconfigurationException
from trainer.seed import isolate_rng

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

EVAL_LOOPS = {"validate": "validate_loop", "test": "test_loop", "predict": "predict_loop"}
STAGES = {"fit": "train", "validate": "validation", "test": "test", "predict": "predict"}  # keys of trainer.limits
_PREFIX = {"validate": "val", "test": "test", "predict": "predict"}


def running_method(trainer: TrainerView, what: str) -> str:
    """The Trainer method that runs now; a search outside one is refused."""
    fn = trainer.state.fn
    if not trainer.state.running_now or fn not in ("fit", *EVAL_LOOPS):
        raise MisconfigurationException(
            f"{what} runs during a stage: call it from a callback hook of fit, validate, test or predict (the "
            "BatchSizeFinder and LearningRateFinder callbacks do), or use trainer.tuner.Tuner before fit."
        )
    return str(fn)


def stage_loaders(trainer: TrainerView, method: str) -> list[Any]:
    """The loaders the stage requested: fit's training loader as it was given, or the evaluation loaders."""
    if method == "fit":
        return [trainer.fit_loop.data.requested()]  # requested now if not yet, and kept for the fit
    return list(getattr(trainer, EVAL_LOOPS[method]).loaders)


def check_one_eval_loader(trainer: TrainerView, method: str) -> None:
    if method != "fit" and len(stage_loaders(trainer, method)) > 1:
        raise MisconfigurationException(
            f"The Batch size finder cannot be used with multiple {_PREFIX[method]} dataloaders."
        )


def check_loaders_not_given(trainer: TrainerView, method: str) -> None:
    """Each trial asks the module (or DataModule) for loaders of the size tried: loaders passed to the stage
    would keep theirs."""
    source = trainer.fit_loop.data.source
    if method == "fit" and source is not None and source.given:
        raise MisconfigurationException(
            "The Batch size finder cannot be used with dataloaders passed directly to `.fit()`. Please disable the "
            "feature or incorporate the dataloader into your LightningModule or LightningDataModule."
        )


def dataset_length(trainer: TrainerView, method: str) -> int | None:
    """The length of the stage's first loader's dataset (None for an iterable dataset)."""
    loaders = stage_loaders(trainer, method)
    try:
        return len(loaders[0].dataset)
    except (AttributeError, IndexError, TypeError):
        return None


def request_loaders_again(trainer: TrainerView, module: Module, method: str) -> None:
    """The stage's loaders requested again from the module or DataModule (the size changed), the old ones'
    workers shut down. The requests' random draws are undone, as the search's are."""
    old = stage_loaders(trainer, method)
    with isolate_rng():
        if method == "fit":
            data = trainer.fit_loop.data
            old += list(trainer.fit_loop.val_loop.loaders)
            data.request_loaders_of(trainer.current_epoch)
            data.place()
            trainer.fit_loop.validation.load(now=True)
        else:
            loop = getattr(trainer, EVAL_LOOPS[method])
            stage = loop.stage
            strategy = trainer.strategy
            loaders = resolve_loaders(
                strategy, trainer.use_distributed_sampler, module, stage, None, trainer.datamodule
            )
            loop.setup(loaders, trainer.limits[stage])
    shut_down_workers(old)
