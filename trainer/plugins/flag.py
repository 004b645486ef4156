"""``Trainer(plugins=...)``: sort what was given into the one precision, checkpoint writer, cluster environment
and layer sync it may hold, with Lightning's rules (one of each kind; a precision plug-in or ``precision=``)."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments import ClusterEnvironment, SLURMEnvironment
from trainer.plugins.io import CheckpointIO
from trainer.plugins.layer_sync import LayerSync, TorchSyncBatchNorm
from trainer.precision import Precision

_KINDS = ((Precision, "Precision"), (CheckpointIO, "CheckpointIO"), (ClusterEnvironment, "ClusterEnvironment"))


@dataclass(frozen=True)
class Plugins:
    precision: Precision | None = None
    checkpoint_io: CheckpointIO | None = None
    cluster_environment: ClusterEnvironment | None = None
    layer_sync: LayerSync | None = None


def read_plugins(plugins: Any, precision: Any, sync_batchnorm: bool) -> Plugins:
    """The plug-ins by kind; a second of one kind, an unknown object, or a precision given twice is refused."""
    if plugins is None:
        given: list[Any] = []
    elif isinstance(plugins, str) or not isinstance(plugins, Iterable):
        given = [plugins]
    else:
        given = list(plugins)
    found: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    for plugin in given:
        kind = _kind(plugin, sync_batchnorm)
        found[kind] = plugin
        counts[kind] += 1
    repeated = [kind for kind, n in counts.items() if n > 1]
    if repeated:
        raise MisconfigurationException(
            f"Received multiple values for {', '.join(repeated)} flags in `plugins`. Expected one value for each type "
            "at most."
        )
    if "Precision" in found and precision is not None:
        raise MisconfigurationException(
            f"Received both `precision={precision}` and `plugins={found['Precision']!r}`. Choose one."
        )
    return Plugins(
        found.get("Precision"), found.get("CheckpointIO"), found.get("ClusterEnvironment"), found.get("LayerSync")
    )


def _kind(plugin: Any, sync_batchnorm: bool) -> str:
    for cls, kind in _KINDS:
        if isinstance(plugin, cls):
            return kind
    if isinstance(plugin, LayerSync):
        if sync_batchnorm and not isinstance(plugin, TorchSyncBatchNorm):
            raise MisconfigurationException(
                f"You set `Trainer(sync_batchnorm=True)` and provided a `{plugin.__class__.__name__}` plugin, but this "
                "is not allowed. Choose one or the other."
            )
        return "LayerSync"
    if isinstance(plugin, str):
        raise MisconfigurationException(
            f"plugins={plugin!r}: plug-ins are objects, not names; give e.g. SLURMEnvironment(), TorchCheckpointIO(), "
            "MixedPrecision('bf16-mixed', 'cuda') or TorchSyncBatchNorm() (trainer.plugins)."
        )
    raise MisconfigurationException(
        f"Found invalid type for plugin {plugin!r}. Expected one of: Precision, CheckpointIO, ClusterEnvironment, "
        "or LayerSync."
    )


def requeue_signal(
    flag: str | None, environment: ClusterEnvironment | None, flag_default: str | None = "SIGUSR1"
) -> str | None:
    """The signal that saves and exits: ``SLURMEnvironment(auto_requeue=False)`` leaves it alone,
    ``SLURMEnvironment(requeue_signal=...)`` names it. Given both ways and different, the Trainer refuses."""
    if not isinstance(environment, SLURMEnvironment):
        return flag
    wanted = environment.requeue_signal.name if environment.auto_requeue else None
    if flag != flag_default and flag != wanted:
        raise MisconfigurationException(
            f"Trainer(requeue_signal={flag!r}) disagrees with {environment!r}; set one of them."
        )
    return wanted


def signal_name(value: str | signal.Signals | None) -> str | None:
    return value.name if isinstance(value, signal.Signals) else value
