"""Synthetic Carvana: saturated toy cars on textured, muted backgrounds, in the real folder layout.

Lets the flagship recipe and its tests run offline in seconds; a tiny UNet learns it to dice > 0.9.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
from PIL import Image

VIEWS_PER_CAR = 16  # Carvana shoots each car from 16 angles: ids are <car hex>_<01..16>


def carvana_id(seed: int, i: int) -> str:
    """Carvana-style id `<12 hex>_<nn>`, stable for a (seed, index)."""
    car = hashlib.sha1(f"{seed}:{i // VIEWS_PER_CAR}".encode()).hexdigest()[:12]
    return f"{car}_{i % VIEWS_PER_CAR + 1:02d}"


def rounded_box(u: np.ndarray, v: np.ndarray, half_w: float, half_h: float, r: float) -> np.ndarray:
    """Inside test of a rounded rectangle centred at the origin (signed-distance form)."""
    qx = np.abs(u) - (half_w - r)
    qy = np.abs(v) - (half_h - r)
    outside = np.hypot(np.maximum(qx, 0), np.maximum(qy, 0))
    return outside + np.minimum(np.maximum(qx, qy), 0) <= r


def background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Muted grey/earth texture: a gradient plus stripes plus noise, float RGB in [0, 1]."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = rng.uniform(0.3, 0.65) + rng.uniform(-0.06, 0.06, size=3)  # near-grey tint
    angle, freq = rng.uniform(0, np.pi), rng.uniform(0.05, 0.4)
    stripes = 0.08 * np.sin(freq * (x * np.cos(angle) + y * np.sin(angle)))
    gradient = rng.uniform(-0.2, 0.2) * (y / h - 0.5) + rng.uniform(-0.2, 0.2) * (x / w - 0.5)
    noise = rng.normal(0, rng.uniform(0.02, 0.08), size=(h, w, 1))
    return base + (stripes + gradient)[..., None] + noise


def car_frame(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Pixel coordinates (u along the car, v downwards) in a random car frame, and its half length/height."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    length = rng.uniform(0.45, 0.8) * w
    hl, hh = length / 2, min(length * rng.uniform(0.12, 0.18), 0.2 * h)
    cx = rng.uniform(hl, w - hl)
    top, bottom = 2.4 * hh, h - 1.75 * hh  # keep cabin and wheels in frame
    cy = rng.uniform(top, bottom) if top < bottom else h / 2
    t = np.deg2rad(rng.uniform(-12, 12))
    u = (x - cx) * np.cos(t) + (y - cy) * np.sin(t)
    v = -(x - cx) * np.sin(t) + (y - cy) * np.cos(t)
    return u, v, hl, hh


def car_parts(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks (body, windows, wheels) of one car: rounded body + cabin on top, two wheels below."""
    u, v, hl, hh = car_frame(rng, h, w)
    body = rounded_box(u, v, hl, hh, 0.6 * hh)
    cu = u - rng.uniform(-0.3, 0.3) * hl  # cabin shifted forward or back
    cabin = rounded_box(cu, v + 1.6 * hh, 0.55 * hl, 0.8 * hh, 0.5 * hh)
    windows = rounded_box(cu, v + 1.6 * hh, 0.45 * hl, 0.55 * hh, 0.35 * hh)
    wheels = (np.hypot(u + 0.6 * hl, v - hh) <= 0.75 * hh) | (np.hypot(u - 0.6 * hl, v - hh) <= 0.75 * hh)
    return body | cabin, windows, wheels


def car_colour(rng: np.random.Generator) -> np.ndarray:
    """A saturated RGB colour: one channel high, one low, one anywhere."""
    c = np.array([rng.uniform(0.75, 1.0), rng.uniform(0.0, 0.2), rng.uniform(0.0, 1.0)])
    return rng.permutation(c)


def render(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """One (uint8 RGB image, uint8 mask in {0, 255}) pair."""
    img = background(rng, h, w)
    body, windows, wheels = car_parts(rng, h, w)
    shade = 1.0 - 0.25 * np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    img = np.where(body[..., None], car_colour(rng) * shade, img)
    img = np.where(windows[..., None], np.array([0.15, 0.2, 0.3]), img)
    img = np.where(wheels[..., None], np.array([0.08, 0.08, 0.08]), img)
    mask = (body | wheels).astype(np.uint8) * 255
    return (np.clip(img, 0, 1) * 255).astype(np.uint8), mask


def save_atomic(image: Image.Image, path: Path) -> None:
    """Write via a temporary name so an interrupted run never leaves a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    image.save(tmp, format=path.suffix.lstrip(".").replace("jpg", "jpeg"))
    os.replace(tmp, path)


def generate_synthetic_carvana(
    root: str | Path, n_images: int = 300, size: tuple[int, int] = (160, 240), seed: int = 0
) -> Path:
    """Write `root/imgs/<id>.jpg` and `root/masks/<id>_mask.gif`; return `root`.

    Each pair depends only on (seed, index), so the set is deterministic and pairs already present are
    skipped: calling again is cheap and a partial run is completed rather than redone.
    """
    root = Path(root)
    imgs, masks = root / "imgs", root / "masks"
    imgs.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    h, w = size
    for i in range(n_images):
        idx = carvana_id(seed, i)
        img_path, mask_path = imgs / f"{idx}.jpg", masks / f"{idx}_mask.gif"
        if img_path.exists() and mask_path.exists():
            continue
        image, mask = render(np.random.default_rng([seed, i]), h, w)
        save_atomic(Image.fromarray(mask, mode="L"), mask_path)
        save_atomic(Image.fromarray(image, mode="RGB"), img_path)
    return root
