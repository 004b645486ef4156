"""wandb, imported on first use, and what ``WandbLogger`` hands it besides numbers: per-item keyword arguments,
segmentation masks, histograms binned as ``wandb.Histogram`` bins them, one-element tensors read as numbers; and
artifacts downloaded."""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import numpy as np  # already loaded by torch

from trainer.loggers.base import finite_values, to_numpy

WANDB_BINS = 64  # wandb.Histogram's default


@functools.cache
def check_wandb() -> None:
    """That wandb is installed, checked once per process: the check (a fresh ``RequirementCache``) costs ~2 ms, and
    a validation that logs 128 histograms would pay it on each. A failure is not cached: it raises again."""
    from lightning_utilities.core.imports import RequirementCache

    if not RequirementCache("wandb"):
        raise ImportError("WandbLogger needs wandb: pip install steadytrain[wandb]")


def import_wandb() -> Any:
    """wandb, imported on first use; looked up at each (a test may put its own ``wandb`` in ``sys.modules``)."""
    check_wandb()
    import wandb

    return wandb


def offline_file_gone(run: Any) -> FileNotFoundError | None:
    """The error when an offline run's ``.wandb`` file was deleted (a cleanup job, ``rm -r`` of the save folder).

    wandb's service keeps writing into the deleted file and ``wandb sync`` later finds nothing: every later metric
    would be lost without a word. Its stream cannot be reopened mid-run, so the run stops, naming the file.
    """
    settings = getattr(run, "settings", None)
    sync_file = getattr(settings, "sync_file", None)
    if getattr(settings, "mode", None) != "offline" or not isinstance(sync_file, str) or os.path.exists(sync_file):
        return None
    return FileNotFoundError(
        f"WandbLogger: the offline run file {sync_file} was deleted while the run logged to it (a cleanup job? rm -r "
        "of the save_dir?). wandb cannot reopen it, so everything logged from now on would be lost: the run stops "
        "here. Resume it from its last checkpoint (ckpt_path='last') with a save_dir no cleanup job touches."
    )


def download_artifact(
    artifact: str,
    save_dir: str | os.PathLike[str] | None = None,
    artifact_type: str | None = None,
    use_artifact: bool | None = True,
) -> str:
    """``WandbLogger.download_artifact``: an artifact's files in ``save_dir`` (through the active run when there is one
    and ``use_artifact``, recorded as its input; else wandb's API); returns the folder."""
    wandb = import_wandb()
    if wandb.run is not None and use_artifact:
        found = wandb.run.use_artifact(artifact)
    else:
        found = wandb.Api().artifact(artifact, type=artifact_type)
    return str(found.download(root=None if save_dir is None else os.fspath(save_dir)))


def per_item(name: str, items: Any, kwargs: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Lightning's media arguments: ``items`` a list, each keyword argument a list with one value per item; the
    keyword arguments of each item."""
    if not isinstance(items, list):
        raise TypeError(f'Expected a list as "{name}", found {type(items)}')
    for key, values in kwargs.items():
        if len(values) != len(items):
            raise ValueError(f"Expected {len(items)} items but only found {len(values)} for {key}")
    return [{key: values[i] for key, values in kwargs.items()} for i in range(len(items))]


def wandb_masks(masks: dict[str, Any], class_labels: dict[int, str] | None) -> dict[str, dict[str, Any]]:
    """Accept bare 2D arrays or tensors as well as wandb's ``{"mask_data": ...}`` dicts."""
    out = {}
    for name, mask in masks.items():
        spec = dict(mask) if isinstance(mask, dict) else {"mask_data": mask}
        spec["mask_data"] = to_numpy(spec["mask_data"])
        if class_labels is not None:
            spec.setdefault("class_labels", class_labels)
        out[name] = spec
    return out


def histogram(values: Any) -> tuple[Any, Any] | None:
    """``np.histogram`` counts and edges in ``wandb.Histogram``'s 64 bins, NaN and inf left out; None when nothing
    finite remains.

    The range is computed here and handed to ``np.histogram``, which would otherwise compute it
    itself: a finite range means every value is finite, so a diverging run is caught at no cost
    (a separate ``isfinite`` pass added ~5% to each histogram, and a UNet logs 128 of them).
    """
    array = to_numpy(values).reshape(-1)
    if not array.size:
        return None
    low, high = array.min(), array.max()
    if not (math.isfinite(low) and math.isfinite(high)):
        array = finite_values(array)
        if not array.size:
            return None
        low, high = array.min(), array.max()
    return np.histogram(array, bins=WANDB_BINS, range=(low, high))


def snapshot(value: Any) -> Any:
    """A one-element tensor as a Python number, read now; anything else as it is (wandb converts it)."""
    if isinstance(value, (float, int)):  # what the Trainer sends; hasattr on a float raises inside
        return value
    return value.item() if hasattr(value, "detach") and value.numel() == 1 else value
