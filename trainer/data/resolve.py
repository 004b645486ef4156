"""Which loaders a stage runs: given ones, a DataModule's or the Module's, checked before any work.

A DataModule's ``prepare_data`` (downloads, generation) runs on global rank zero while the other
ranks wait; then ``setup(stage)`` runs on every rank.
"""

from __future__ import annotations

import reprlib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset

from trainer.data.combined import CombinedLoader, ShapedLoaders, _is_leaf, map_loaders, shaped
from trainer.data.loaders import has_len, warn_spawned_workers
from trainer.data.sharding import check_shardable, unshuffled
from trainer.exceptions import MisconfigurationException, MisconfigurationTypeError

if TYPE_CHECKING:
    from trainer.strategies.base import Strategy


def _is_batch(obj: Any) -> bool:
    """A tensor, a dict or a tuple of tensors: what a loader yields, never a loader itself."""
    if isinstance(obj, torch.Tensor | Mapping):
        return True
    return isinstance(obj, tuple | list) and bool(obj) and all(isinstance(x, torch.Tensor) for x in obj)


def _as_list(loaders: Any, what: str) -> list[Any]:
    """One loader, or several in a list, tuple or dict, as a list that remembers that shape (``ShapedLoaders``).

    A list of batches would be read as several loaders, each iterated row by row (or key by
    key): refused, as a silent wrong answer is worse than an error.
    """
    if loaders is None:
        return []
    if isinstance(loaders, list | tuple) and not loaders:  # ``val_dataloader`` returning []: none, as in Lightning
        warnings.warn(f"The {what} loaders are an empty {type(loaders).__name__}: no {what} runs.", stacklevel=2)
        return []
    if isinstance(loaders, CombinedLoader):  # sequential: each loader with its dataloader_idx; else one loader
        return shaped(loaders.iterables) if loaders.mode == "sequential" else shaped(loaders)
    if _is_loader_dict(loaders):
        return shaped(loaders)
    if not isinstance(loaders, Sequence) or isinstance(loaders, str):
        return shaped(loaders)
    for i, item in enumerate(loaders):
        if _is_batch(item):
            raise TypeError(
                f"the {what} loaders ({type(loaders).__name__}) hold a {type(item).__name__} at index {i}, which is "
                "a batch, but a list means several loaders. Pass [batches] for one loader of these batches, "
                "or a DataLoader."
            )
    return shaped(loaders)


def _check_loader(loader: Any, what: str, origin: str) -> None:
    """Refuse, naming its type, what is not an iterable of batches, before any work is done (Lightning's TypeError,
    ``origin`` saying where it came from: passed to a Trainer method, or returned from a hook)."""
    name = type(loader).__name__
    if isinstance(loader, Dataset):
        problem, fix = "a Dataset, which yields samples, not batches", "wrap it in DataLoader(dataset, batch_size=...)"
    elif isinstance(loader, torch.Tensor | Mapping):
        problem, fix = "one batch (iterating it gives rows or keys)", "pass [batch], a list of batches or a DataLoader"
    elif isinstance(loader, str | bytes) or not isinstance(loader, Iterable):
        problem, fix = "not an iterable of batches", "pass a DataLoader, a list of batches or another iterable of them"
    else:
        return
    raise TypeError(
        f"An invalid dataloader was {origin}. Found {reprlib.repr(loader)}: the {what} loader ({name}) is {problem}; "
        f"{fix}."
    )


_CALLS = {  # a stage's loaders, as the Trainer method that takes them names them
    "training": "fit(train_dataloaders=...)",
    "fit validation": "fit(val_dataloaders=...)",
    "validation": "validate(dataloaders=...)",
    "test": "test(dataloaders=...)",
    "predict": "predict(dataloaders=...)",
}
_HOOKS = {"training": "train", "fit validation": "val", "validation": "val", "test": "test", "predict": "predict"}


def _hook_written(source: Any, name: str) -> bool:
    """Whether ``source`` (a module or DataModule) has its own ``name`` loader hook, not the base class's."""
    from trainer.datamodule import DataModule
    from trainer.module import written

    if not written(source, name):
        return False
    return not isinstance(source, DataModule) or getattr(type(source), name, None) is not getattr(DataModule, name)


def _request(given: Any, source: Any, stage: str) -> tuple[Any, str]:
    """``given``, else what ``source``'s loader hook returns; and where it came from, for the messages. Neither:
    Lightning's TypeError naming both ways to give loaders."""
    call = _CALLS[stage]
    if given is not None:
        return given, f"passed to `Trainer.{call}`"
    hook = f"{_HOOKS[stage]}_dataloader"
    if not _hook_written(source, hook):
        fn = call.split("(")[0]
        raise MisconfigurationTypeError(
            f"An invalid dataloader was passed to `Trainer.{call}`. Found None. Either pass the dataloader to the "
            f"`.{fn}()` method OR implement `def {hook}(self):` in your LightningModule/LightningDataModule ("
            + (
                "fit() needs a training DataLoader (train_dataloaders=) or a DataModule)."
                if stage == "training"
                else f"{stage.split()[-1]} needs dataloaders= or a DataModule with {hook}())."
            )
        )
    origin = f"returned from `{type(source).__name__}.{hook}()`"
    loaders = getattr(source, hook)()
    if loaders is None:
        raise MisconfigurationTypeError(f"An invalid dataloader was {origin}. Found None: return a DataLoader.")
    return loaders, origin


def _is_loader_dict(obj: Any) -> bool:
    """``{"name": loader, ...}``: several loaders (a dict batch holds tensors instead)."""
    return (
        isinstance(obj, Mapping)
        and bool(obj)
        and all(isinstance(v, Iterable) and not isinstance(v, torch.Tensor | Mapping | str) for v in obj.values())
    )


def _is_loader_list(obj: Any) -> bool:
    """``[loader_a, loader_b]``: several training loaders (a list of batches holds tensors instead)."""
    return (
        isinstance(obj, list | tuple)
        and bool(obj)
        and all(isinstance(v, Iterable) and not isinstance(v, torch.Tensor | Mapping | str | tuple | list) for v in obj)
    )


def validates(module: Any) -> bool:
    """Whether fit validates: only a module with a ``validation_step`` does (Lightning skips the loop, and the
    sanity check, otherwise, and never asks for the validation loaders)."""
    from trainer.module import written

    return written(module, "validation_step")


def _defines_val_loader(source: Any) -> bool:
    """Lightning's test: ``val_dataloader`` overridden (a DataModule's default returns None)."""
    from trainer.datamodule import DataModule
    from trainer.module import written

    if not written(source, "val_dataloader"):
        return False
    return not isinstance(source, DataModule) or type(source).val_dataloader is not DataModule.val_dataloader


def skipped_validation_warning(module: Any, val: Any, datamodule: Any) -> tuple[str, type[Warning]] | None:
    """Lightning's warning when fit has validation loaders but no ``validation_step``, or the reverse."""
    from trainer.user_warnings import PossibleUserWarning

    has_loader = val is not None or _defines_val_loader(datamodule if datamodule is not None else module)
    if has_loader and not validates(module):
        return "You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.", UserWarning
    if validates(module) and not has_loader:
        return "You defined a `validation_step` but have no `val_dataloader`. Skipping val loop.", PossibleUserWarning
    return None


def is_datamodule(obj: Any) -> bool:
    """A DataModule (Lightning's or ours), passed where loaders go."""
    return hasattr(obj, "setup") and hasattr(obj, "train_dataloader") and not hasattr(obj, "dataset")


def _replicas(strategy: Strategy) -> int:
    """The parts the loaders are split into (one per data-parallel replica)."""
    return strategy.distributed_sampler_kwargs["num_replicas"]


def _check_usable(loader: Any, strategy: Strategy, use_distributed_sampler: bool, what: str, origin: str) -> None:
    """Type, sharding and emptiness checks of one loader, so a mistake fails before any batch runs."""
    if isinstance(loader, CombinedLoader):
        for inner in loader.flattened:
            _check_usable(inner, strategy, use_distributed_sampler, what, origin)
        return
    _check_loader(loader, what, origin)
    check_shardable(loader, _replicas(strategy), use_distributed_sampler, what)
    if strategy.global_rank == 0:
        warn_spawned_workers(loader, what)
    if has_len(loader) and len(loader) == 0:
        if isinstance(loader, DataLoader):
            raise MisconfigurationException(
                f"the {what} DataLoader is empty (0 batches): check its dataset and batch_size."
            )
        raise MisconfigurationException(f"the {what} loader ({type(loader).__name__}) is empty (0 batches).")


def _training_loader(primary: Any) -> Any:
    """fit's training loader; several (a dict or list of loaders) combine as Lightning's ``max_size_cycle``."""
    if _is_loader_dict(primary) or _is_loader_list(primary) or _holds_a_non_iterable(primary):
        primary = CombinedLoader(primary, "max_size_cycle")
    if isinstance(primary, CombinedLoader) and primary.mode == "sequential":
        raise MisconfigurationException(
            '`FitLoop` does not support the `CombinedLoader(mode="sequential")` mode: each training batch is one '
            'batch of every loader. Choose mode="max_size_cycle", "max_size" or "min_size".'
        )
    return primary


def _holds_a_non_iterable(obj: Any) -> bool:
    """A list or tuple of training loaders with one that is not iterable (``[loader, 3]``): combined as several
    loaders, so the check names the bad one (a list of batches holds tensors or tuples, all iterable)."""
    return (
        isinstance(obj, list | tuple)
        and not _is_leaf(obj)
        and any(not isinstance(v, Iterable) and not isinstance(v, torch.Tensor) for v in obj)
    )


def _source(module: Any, datamodule: Any) -> Any:
    """Who supplies the loaders not given: the DataModule, else the module."""
    return datamodule if datamodule is not None else module


def resolve_loaders(
    strategy: Strategy, use_distributed_sampler: bool, module: Any, stage: str, given: Any, datamodule: Any
) -> list[Any]:
    """An evaluation stage's loaders (as a list remembering the shape given): ``given``, else the DataModule's
    or the module's ``<stage>_dataloader()``; each checked."""
    if is_datamodule(given):
        datamodule, given = given, None
    stage = "validation" if stage == "validate" else stage
    given, origin = _request(given, _source(module, datamodule), stage)
    loaders = _as_list(given, stage)
    for loader in loaders:
        _check_usable(loader, strategy, use_distributed_sampler, stage, origin)
    return loaders


class LoaderSource:
    """Where fit's loaders come from, kept so they can be requested again
    (``reload_dataloaders_every_n_epochs``): given ones are the same objects each time; the module's or
    DataModule's ``*_dataloader()`` hooks are called anew. Training's are requested when an epoch needs them,
    validation's when a validation does (Lightning's points, ``trainer.loops.fit_validation``)."""

    def __init__(
        self,
        strategy: Strategy,
        use_distributed_sampler: bool,
        module: Any,
        train: Any,
        val: Any,
        datamodule: Any,
        overfit: bool = False,
    ) -> None:
        if is_datamodule(train):
            datamodule, train = train, None
        self.overfit = overfit  # overfit_batches: the loaders in their datasets' order (Lightning's rule)
        self.strategy, self.use_distributed_sampler = strategy, use_distributed_sampler
        self.module, self.train, self.val, self.datamodule = module, train, val, datamodule
        self.validation_warning = skipped_validation_warning(module, val, datamodule)
        self.given = [name for name, obj in (("training", train), ("validation", val)) if obj is not None]

    @property
    def defines_val(self) -> bool:
        """Whether fit validates: a ``validation_step`` and validation loaders given or a ``val_dataloader()``."""
        source = _source(self.module, self.datamodule)
        return validates(self.module) and (self.val is not None or _defines_val_loader(source))

    def request_train(self) -> Any:
        train, origin = _request(self.train, _source(self.module, self.datamodule), "training")
        train = _training_loader(train)
        _check_usable(train, self.strategy, self.use_distributed_sampler, "training", origin)
        return map_loaders(train, unshuffled) if self.overfit else train

    def request_val(self) -> list[Any]:
        if not self.defines_val:
            return []
        val, origin = _request(self.val, _source(self.module, self.datamodule), "fit validation")
        loaders = _as_list(val, "validation")
        for loader in loaders:
            _check_usable(loader, self.strategy, self.use_distributed_sampler, "validation", origin)
        if self.overfit:
            loaders = ShapedLoaders(
                [map_loaders(v, _unshuffled_val) for v in loaders], getattr(loaders, "unflatten", list)
            )
        return loaders


def _unshuffled_val(loader: Any) -> Any:
    return unshuffled(loader, "val")
