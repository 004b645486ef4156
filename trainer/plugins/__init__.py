"""Lightning's plug-ins (``lightning.pytorch.plugins``): what ``Trainer(plugins=[...])`` takes.

Cluster environments (``environments``), checkpoint writers (``io``), layer synchronisation
(``layer_sync``) and precision (``precision``, steadytrain's ``trainer.precision`` under Lightning's path).
"""

from trainer.plugins.environments import (
    ClusterEnvironment,
    KubeflowEnvironment,
    LightningEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
    XLAEnvironment,
)
from trainer.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO, XLACheckpointIO
from trainer.plugins.layer_sync import LayerSync, TorchSyncBatchNorm
from trainer.plugins.precision import (
    BitsandbytesPrecision,
    DeepSpeedPrecision,
    DoublePrecision,
    FSDPPrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
    TransformerEnginePrecision,
    XLAPrecision,
)

__all__ = [
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "CheckpointIO",
    "ClusterEnvironment",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "FSDPPrecision",
    "HalfPrecision",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LayerSync",
    "LightningEnvironment",
    "MPIEnvironment",
    "MixedPrecision",
    "Precision",
    "SLURMEnvironment",
    "TorchCheckpointIO",
    "TorchElasticEnvironment",
    "TorchSyncBatchNorm",
    "TransformerEnginePrecision",
    "XLACheckpointIO",
    "XLAEnvironment",
    "XLAPrecision",
]
