"""ShuffleNet-v1 style image classifier on synthetic class-dependent patterns."""

from .data import SyntheticShapes
from .model import ShuffleNet, ShuffleUnit

__all__ = ["ShuffleNet", "ShuffleUnit", "SyntheticShapes"]
