"""Lightning's availability flags (``lightning.pytorch.utilities.imports``), so a ported
``if _TORCHVISION_AVAILABLE: import torchvision`` reads the same. Each is checked when first read."""

from __future__ import annotations

import sys

from lightning_utilities.core.imports import RequirementCache, package_available

_PYTHON_GREATER_EQUAL_3_11_0 = sys.version_info >= (3, 11)
_TORCHVISION_AVAILABLE = RequirementCache("torchvision")
_RICH_AVAILABLE = RequirementCache("rich>=10.2.2")
_OMEGACONF_AVAILABLE = package_available("omegaconf")
_TORCHMETRICS_GREATER_EQUAL_1_0_0 = RequirementCache("torchmetrics>=1.0.0")

FLAGS = (
    "_OMEGACONF_AVAILABLE",
    "_PYTHON_GREATER_EQUAL_3_11_0",
    "_RICH_AVAILABLE",
    "_TORCHMETRICS_GREATER_EQUAL_1_0_0",
    "_TORCHVISION_AVAILABLE",
)
