"""Which loaders a stage runs: given ones, a DataModule's or the Module's, checked before any work.

A DataModule's ``prepare_data`` (downloads, generation) runs on global rank zero while the other
ranks wait; then ``setup(stage)`` runs on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset

from trainer.data.loaders import has_len
from trainer.data.sharding import check_shardable
from trainer.exceptions import MisconfigurationException
from trainer.seed import isolate_rng

if TYPE_CHECKING:
    from trainer.strategies.base import Strategy


def _is_batch(obj: Any) -> bool:
    """A tensor, a dict or a tuple of tensors: what a loader yields, never a loader itself."""
    if isinstance(obj, torch.Tensor | Mapping):
        return True
    return isinstance(obj, tuple | list) and bool(obj) and all(isinstance(x, torch.Tensor) for x in obj)


def _as_list(loaders: Any, what: str) -> list[Any]:
    """One loader, or several in a list or tuple.

    A list of batches would be read as several loaders, each iterated row by row (or key by
    key): refused, as a silent wrong answer is worse than an error.
    """
    if loaders is None:
        return []
    if _is_loader_dict(loaders):
        return list(loaders.values())
    if not isinstance(loaders, Sequence) or isinstance(loaders, str):
        return [loaders]
    for i, item in enumerate(loaders):
        if _is_batch(item):
            raise TypeError(
                f"the {what} loaders ({type(loaders).__name__}) hold a {type(item).__name__} at index {i}, which is "
                "a batch, but a list means several loaders. Pass [batches] for one loader of these batches, "
                "or a DataLoader."
            )
    return list(loaders)


def _check_loader(loader: Any, what: str) -> None:
    """Refuse, naming its type, what is not an iterable of batches, before any work is done."""
    name = type(loader).__name__
    if isinstance(loader, Dataset):
        problem, fix = "a Dataset, which yields samples, not batches", "wrap it in DataLoader(dataset, batch_size=...)"
    elif isinstance(loader, torch.Tensor | Mapping):
        problem, fix = "one batch (iterating it gives rows or keys)", "pass [batch], a list of batches or a DataLoader"
    elif isinstance(loader, str | bytes) or not isinstance(loader, Iterable):
        problem, fix = "not an iterable of batches", "pass a DataLoader, a list of batches or another iterable of them"
    else:
        return
    raise TypeError(f"the {what} loader ({name}) is {problem}; {fix}.")


def _is_loader_dict(obj: Any) -> bool:
    """``{"name": loader, ...}``: several loaders (a dict batch holds tensors instead)."""
    return (
        isinstance(obj, Mapping)
        and bool(obj)
        and all(isinstance(v, Iterable) and not isinstance(v, torch.Tensor | Mapping | str) for v in obj.values())
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


def _check_usable(loader: Any, world_size: int, use_distributed_sampler: bool, what: str) -> None:
    """Type, sharding and emptiness checks of one loader, so a mistake fails before any batch runs."""
    _check_loader(loader, what)
    check_shardable(loader, world_size, use_distributed_sampler, what)
    if has_len(loader) and len(loader) == 0:
        if isinstance(loader, DataLoader):
            raise MisconfigurationException(
                f"the {what} DataLoader is empty (0 batches): check its dataset and batch_size."
            )
        raise MisconfigurationException(f"the {what} loader ({type(loader).__name__}) is empty (0 batches).")


def resolve_loaders(
    strategy: Strategy,
    use_distributed_sampler: bool,
    module: Any,
    stage: str,
    primary: Any,
    val: Any,
    datamodule: Any,
    val_first: bool = False,
) -> tuple[Any, list[Any]]:
    """(train loader, val loaders) for "fit"; (list of loaders, []) for evaluation stages.

    The DataModule (its ``prepare_data`` and ``setup`` already ran) or the module supplies what was
    not given. A dict of loaders is several loaders, in its order. ``val_first``: Lightning's order
    when a sanity check runs, which asks for the validation loaders inside it (its random draws
    undone with the check's) and for the training loader after it.
    """
    if is_datamodule(primary):
        datamodule, primary = primary, None
    from trainer.module import written

    source: Any = datamodule if datamodule is not None else module
    name = {"fit": "train", "validation": "val", "validate": "val"}.get(stage, stage)
    if stage == "fit" and not validates(module):
        val, val_first = [], False  # neither asked for nor checked, as in Lightning
    if val_first and val is None and written(source, "val_dataloader"):
        with isolate_rng():
            val = source.val_dataloader()
    if primary is None and written(source, f"{name}_dataloader"):
        primary = getattr(source, f"{name}_dataloader")()
    if stage == "fit":
        if primary is None:
            raise MisconfigurationException("fit() needs a training DataLoader (train_dataloaders=) or a DataModule.")
        if val is None and written(source, "val_dataloader"):
            val = source.val_dataloader()
        _check_usable(primary, strategy.world_size, use_distributed_sampler, "training")
        vals = _as_list(val, "validation")
        for v in vals:
            _check_usable(v, strategy.world_size, use_distributed_sampler, "validation")
        return primary, vals
    loaders = _as_list(primary, stage)
    if not loaders:
        raise MisconfigurationException(f"{stage} needs dataloaders= or a DataModule with {name}_dataloader().")
    for loader in loaders:
        _check_usable(loader, strategy.world_size, use_distributed_sampler, stage)
    return loaders, []


class LoaderSource:
    """Where fit's loaders come from, kept so they can be requested again
    (``reload_dataloaders_every_n_epochs``): given ones are the same objects each time; the module's or
    DataModule's ``*_dataloader()`` hooks are called anew."""

    def __init__(
        self, strategy: Strategy, use_distributed_sampler: bool, module: Any, train: Any, val: Any, datamodule: Any
    ) -> None:
        if is_datamodule(train):
            datamodule, train = train, None
        self._args = (strategy, use_distributed_sampler, module, "fit", train, val, datamodule)
        self.validation_warning = skipped_validation_warning(module, val, datamodule)
        self.given = [name for name, obj in (("training", train), ("validation", val)) if obj is not None]

    def request(self, val_first: bool = False) -> tuple[Any, list[Any]]:
        return resolve_loaders(*self._args, val_first=val_first)
