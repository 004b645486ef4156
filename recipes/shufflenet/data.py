"""Deterministic, class-dependent synthetic images so a classifier's accuracy rises within a few steps."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset


class SyntheticShapes(Dataset[tuple[Tensor, Tensor]]):
    """Item i is (image (3, size, size) float in [0, 1], label int64), a function of (seed, i) only.

    Class k draws stripes at angle pi*k/n_classes with a class-specific frequency and a tint of hue
    k/n_classes; phase, contrast, brightness and noise vary per sample. Nothing is stored, so any `n` is
    free and workers/ranks need no shared state.
    """

    def __init__(self, n: int = 1024, size: int = 32, n_classes: int = 10, seed: int = 0) -> None:
        self.n, self.size, self.n_classes, self.seed = n, size, n_classes, seed
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
        self.grid = (yy, xx)

    def __len__(self) -> int:
        return self.n

    def tint(self, label: int) -> np.ndarray:
        """RGB colour on the hue circle: three phase-shifted cosines."""
        hue = 2 * np.pi * label / self.n_classes
        return 0.5 + 0.4 * np.cos(hue - np.array([0.0, 2.0944, 4.1888], dtype=np.float32))

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        rng = np.random.default_rng([self.seed, i])
        label = int(rng.integers(self.n_classes))
        yy, xx = self.grid
        angle = np.pi * label / self.n_classes
        freq = 2 * np.pi * (3 + label % 3)
        wave = np.sin(freq * (xx * np.cos(angle) + yy * np.sin(angle)) + rng.uniform(0, 2 * np.pi))
        pattern = 0.5 + rng.uniform(0.25, 0.45) * wave + rng.uniform(-0.1, 0.1)
        image = pattern[None] * self.tint(label)[:, None, None] * 2
        image += rng.normal(0, 0.08, size=image.shape)
        return torch.from_numpy(np.clip(image, 0, 1).astype(np.float32)), torch.tensor(label)
