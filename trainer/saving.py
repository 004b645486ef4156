"""Hyperparameters in files: ``hparams.yaml`` (what the loggers write beside a run) and Lightning's older
``tags.csv``, read and written as Lightning's ``core.saving`` does, with YAML's safe loader: a file's tags never
build Python objects."""

from __future__ import annotations

import ast
import csv
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from enum import Enum
from typing import Any

from trainer.hparams import AttributeDict


def load_hparams_from_yaml(config_yaml: str | os.PathLike[str], use_omegaconf: bool = True) -> dict[str, Any]:
    """The hyperparameters in ``config_yaml`` ({} with a warning when the file is missing); an OmegaConf
    ``DictConfig`` where omegaconf is installed and ``use_omegaconf``."""
    import yaml

    if not os.path.exists(config_yaml):
        warnings.warn(f"Missing Tags: {config_yaml}.", RuntimeWarning, stacklevel=2)
        return {}
    with open(config_yaml) as f:
        hparams = yaml.safe_load(f)
    if use_omegaconf and _omegaconf_available():
        from omegaconf import OmegaConf
        from omegaconf.errors import UnsupportedValueType, ValidationError

        try:
            return OmegaConf.create(hparams)  # type: ignore[no-any-return]
        except (UnsupportedValueType, ValidationError):
            pass
    return hparams  # type: ignore[no-any-return]


def save_hparams_to_yaml(
    config_yaml: str | os.PathLike[str], hparams: Mapping[str, Any] | Namespace, use_omegaconf: bool = True
) -> None:
    """Write ``hparams`` as YAML; a value YAML cannot hold is written as its type's name, with a warning."""
    import yaml

    folder = os.path.dirname(config_yaml)
    if folder and not os.path.isdir(folder):
        raise RuntimeError(f"Missing folder: {folder}.")
    if isinstance(hparams, Namespace):
        hparams = vars(hparams)
    if use_omegaconf and _omegaconf_available():
        from omegaconf import DictConfig, OmegaConf

        hparams = {
            k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig) else v for k, v in hparams.items()
        }
    if not isinstance(hparams, Mapping):
        raise TypeError(f"hparams must be a dict or a Namespace, got {type(hparams).__name__}.")
    allowed = {}
    for key, value in dict(hparams).items():
        value = value.name if isinstance(value, Enum) else value
        value = dict(value) if isinstance(value, AttributeDict) else value
        try:
            yaml.dump(value, Dumper=yaml.SafeDumper)
        except (TypeError, ValueError, yaml.representer.RepresenterError):
            warnings.warn(
                f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.", stacklevel=2
            )
            continue
        allowed[key] = value
    with open(config_yaml, "w", newline="") as f:
        yaml.dump(allowed, f, Dumper=yaml.SafeDumper)


def load_hparams_from_tags_csv(tags_csv: str | os.PathLike[str]) -> dict[str, Any]:
    """Lightning 0.x's ``tags.csv`` ({} with a warning when missing); values parsed as Python literals."""
    if not os.path.exists(tags_csv):
        warnings.warn(f"Missing Tags: {tags_csv}.", RuntimeWarning, stacklevel=2)
        return {}
    with open(tags_csv, newline="") as f:
        return {row[0]: convert(row[1]) for row in list(csv.reader(f))[1:]}


def save_hparams_to_tags_csv(tags_csv: str | os.PathLike[str], hparams: Mapping[str, Any] | Namespace) -> None:
    folder = os.path.dirname(tags_csv)
    if folder and not os.path.isdir(folder):
        raise RuntimeError(f"Missing folder: {folder}.")
    hparams = vars(hparams) if isinstance(hparams, Namespace) else hparams
    with open(tags_csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["key", "value"])
        writer.writerows(hparams.items())


def update_hparams(hparams: dict[str, Any], updates: Mapping[str, Any]) -> None:
    """``updates`` merged into ``hparams`` in place, nested dicts key by key."""
    for key, value in updates.items():
        if key in hparams and isinstance(value, Mapping) and isinstance(hparams[key], dict):
            update_hparams(hparams[key], value)
        else:
            hparams[key] = value


def convert(value: str) -> Any:
    """A string as the Python literal it spells, else the string."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _omegaconf_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("omegaconf") is not None
