"""Write predicted masks for a folder of images, at each image's original size."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from .data import IMAGE_SUFFIXES, files_by_stem, load_image


@torch.no_grad()
def predict_mask(model: nn.Module, image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Class indices (H, W) at `size` (H, W); logits are upsampled before argmax for smooth edges."""
    logits = model(image.unsqueeze(0))
    logits = F.interpolate(logits, size=size, mode="bilinear", align_corners=False)
    return logits.argmax(dim=1)[0]


def predict_masks(
    model: nn.Module,
    images_dir: str | Path,
    out_dir: str | Path,
    scale: float = 1.0,
    device: str | torch.device = "cpu",
) -> list[Path]:
    """Save `<out_dir>/<id>_mask.png` per image: grey = class index * 255 // (classes - 1).

    The model runs in eval mode (BatchNorm running stats) and its previous mode is restored.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_classes = int(getattr(model, "n_classes", 2))
    step = 255 // max(n_classes - 1, 1)
    was_training = model.training
    model.eval()
    written = []
    try:
        for idx, path in files_by_stem(Path(images_dir), IMAGE_SUFFIXES).items():
            with Image.open(path) as f:
                width, height = f.size
            mask = predict_mask(model, load_image(path, scale).to(device), (height, width)).cpu()
            target = out / f"{idx}_mask.png"
            Image.fromarray((mask * step).to(torch.uint8).numpy()).save(target)
            written.append(target)
    finally:
        model.train(was_training)
    return written


def write_mask(mask: torch.Tensor, path: Path, n_classes: int) -> Path:
    """Save class indices (H, W) as a grey PNG: class * 255 // (classes - 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    step = 255 // max(n_classes - 1, 1)
    Image.fromarray((mask.cpu() * step).to(torch.uint8).numpy()).save(path)
    return path
