"""A picture of what the model sees: image | true mask | predicted mask, one row per sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image


def _rgb(mask: torch.Tensor) -> np.ndarray:
    grey = (mask.numpy() > 0).astype(np.uint8) * 255
    return np.repeat(grey[..., None], 3, axis=2)


def save_sample_grid(path: Path, images: torch.Tensor, masks: torch.Tensor, predictions: torch.Tensor) -> Path:
    """Write a PNG grid for (N, 3, H, W) images in [0, 1] and (N, H, W) class masks."""
    rows = []
    for image, mask, prediction in zip(images, masks, predictions):
        rgb = (image.clamp(0, 1).permute(1, 2, 0).numpy() * 255).astype(np.uint8)
        rows.append(np.concatenate([rgb, _rgb(mask), _rgb(prediction)], axis=1))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(rows, axis=0)).save(path)
    return path
