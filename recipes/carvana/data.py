"""Carvana-layout segmentation dataset (`imgs/<id>.jpg`, `masks/<id>_mask.gif`) and a seeded split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset, Subset, random_split

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def files_by_stem(folder: Path, suffixes: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Map file stem -> path, sorted by stem so index order is the same on every rank and run."""
    files = (p for p in folder.iterdir() if p.is_file() and (suffixes is None or p.suffix.lower() in suffixes))
    return dict(sorted((p.stem, p) for p in files))


def scaled_size(size: tuple[int, int], scale: float) -> tuple[int, int]:
    """(W, H) times `scale`, refusing a scale that collapses the image."""
    w, h = int(size[0] * scale), int(size[1] * scale)
    if w <= 0 or h <= 0:
        raise ValueError(f"scale={scale} is too small for an image of size {size}")
    return w, h


def load_image(path: Path, scale: float = 1.0) -> Tensor:
    """RGB image -> float tensor (3, H, W) in [0, 1], resized with BICUBIC."""
    with Image.open(path) as f:
        img = f.convert("RGB")
    if scale != 1.0:
        img = img.resize(scaled_size(img.size, scale), Image.Resampling.BICUBIC)
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1).contiguous()


def load_mask_array(path: Path, scale: float = 1.0) -> np.ndarray:
    """Mask as grey values (H, W), resized with NEAREST so no new values appear.

    Palette images are converted to grey: Pillow reorders a GIF palette by use when saving, so palette
    indices are not stable labels across files, while the displayed grey value (0 or 255) is.
    """
    with Image.open(path) as f:
        img = f.convert("L") if f.mode not in ("L", "I", "I;16") else f.copy()
    if scale != 1.0:
        img = img.resize(scaled_size(img.size, scale), Image.Resampling.NEAREST)
    return np.asarray(img)


class CarvanaDataset(Dataset[dict[str, Tensor]]):
    """Image/mask pairs with mask values mapped to class indices 0..K-1.

    The sorted unique mask values over the whole dataset become the classes (0/255 -> 0/1), scanned once
    here so every item, rank and split shares one mapping.
    """

    def __init__(
        self, images_dir: str | Path, masks_dir: str | Path, scale: float = 1.0, mask_suffix: str = "_mask"
    ) -> None:
        if not 0 < scale <= 1:
            raise ValueError(f"scale must be in (0, 1], got {scale}")
        self.images_dir = Path(images_dir)
        self.masks_dir = Path(masks_dir)
        self.scale = scale
        self.mask_suffix = mask_suffix
        self.image_paths = files_by_stem(self.images_dir, IMAGE_SUFFIXES)
        if not self.image_paths:
            raise FileNotFoundError(f"No images ({', '.join(IMAGE_SUFFIXES)}) found in {self.images_dir}")
        self.ids = list(self.image_paths)
        self.mask_paths = self._pair_masks()
        self.mask_values = self._scan_mask_values()

    def __len__(self) -> int:
        return len(self.ids)

    def _pair_masks(self) -> list[Path]:
        """Mask path per id, failing early (naming the id) rather than mid-epoch."""
        masks = files_by_stem(self.masks_dir)
        paths = []
        for idx in self.ids:
            path = masks.get(idx + self.mask_suffix)
            if path is None:
                raise FileNotFoundError(
                    f"No mask for image id {idx!r}: expected {self.masks_dir / (idx + self.mask_suffix)}.*"
                )
            paths.append(path)
        return paths

    def _scan_mask_values(self) -> list[int]:
        values: set[int] = set()
        for path in self.mask_paths:
            values.update(np.unique(load_mask_array(path)).tolist())
        return sorted(values)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        image = load_image(self.image_paths[self.ids[i]], self.scale)
        raw = load_mask_array(self.mask_paths[i], self.scale)
        mask = np.searchsorted(np.asarray(self.mask_values), raw)
        return {"image": image, "mask": torch.from_numpy(mask.astype(np.int64))}


def split_dataset(
    dataset: Dataset[dict[str, Tensor]], val_percent: float = 10.0, seed: int = 0
) -> tuple[Subset[dict[str, Tensor]], Subset[dict[str, Tensor]]]:
    """(train, val) subsets; a fixed generator makes the split identical on every rank and rerun."""
    n = len(dataset)  # type: ignore[arg-type]
    n_val = int(n * val_percent / 100)
    train, val = random_split(dataset, [n - n_val, n_val], generator=torch.Generator().manual_seed(seed))
    return train, val
