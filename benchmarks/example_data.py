"""Synthetic stand-ins, of the real shapes, for what Lightning's example scripts download
(benchmarks/lightning_examples.py): MNIST, CIFAR-10, WikiText-2, the cats-and-dogs zip, an ImageNet and a
KITTI folder, and torchvision's pretrained weights (random weights under the file name torch.hub looks for).

Each maker writes into a folder once (``cache``) and is copied or linked into each run's folder. Needs numpy
and Pillow; the weights need torchvision.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np


def _images(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    """Random uint8 images with a per-image brightness, so the classes and losses are not all alike."""
    base = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    return (base // 2 + rng.integers(0, 128, size=(n,) + (1,) * len(shape), dtype=np.uint8)).astype(np.uint8)


def mnist_raw(folder: Path) -> None:
    """torchvision's MNIST layout: ``MNIST/raw/*-ubyte`` (60,000 training and 10,000 test images)."""
    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 60000), ("t10k", 10000)):
        images = _images(rng, n, (28, 28))
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


def cifar10(folder: Path) -> None:
    """torchvision's CIFAR-10 layout: ``cifar-10-batches-py/`` with five training batches and a test batch."""
    out = folder / "cifar-10-batches-py"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": _images(rng, 10000, (3072,)), b"labels": rng.integers(0, 10, size=10000).tolist()}
        with open(out / name, "wb") as f:
            pickle.dump(batch, f)
    with open(out / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)


def wikitext2(folder: Path, samples: int = 4100, block: int = 35) -> None:
    """``data/wikitext-2.txt``: lines of words from a 500-word vocabulary (Zipf-like), enough text for
    ``samples`` blocks of ``block`` words (the transformer example splits off 4,000 of them)."""
    rnd = random.Random(2)
    vocab = [f"w{i}" for i in range(500)]
    weights = [1.0 / (i + 1) for i in range(500)]
    words, lines = 0, []
    while words < (samples + 2) * block:
        line = rnd.choices(vocab, weights, k=rnd.randint(5, 30))
        lines.append(" ".join(line))
        words += len(line) + 1
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "wikitext-2.txt").write_text("\n".join(lines) + "\n", encoding="utf8")


def _image_folder(root: Path, classes: list[str], per_class: int, size: tuple[int, int], seed: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = _images(rng, 1, (size[1], size[0], 3))[0]
            Image.fromarray(pixels).save(root / name / f"{i}.jpg", quality=90)


def cats_and_dogs(folder: Path) -> None:
    """``data/cats_and_dogs_filtered.zip`` as the fine-tuning example downloads it (train and validation)."""
    staging = folder / "staging"
    for split, n in (("train", 16), ("validation", 8)):
        _image_folder(staging / "cats_and_dogs_filtered" / split, ["cats", "dogs"], n, (96, 80), seed=3)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / "data" / "cats_and_dogs_filtered.zip", "w") as archive:
        for path in sorted(staging.rglob("*.jpg")):
            archive.write(path, path.relative_to(staging))
    shutil.rmtree(staging)


def imagenet(folder: Path) -> None:
    """``imagenet/{train,val}/<wnid>/*.JPEG``: three classes of a few images each."""
    classes = ["n01440764", "n01443537", "n01484850"]
    _image_folder(folder / "imagenet" / "train", classes, 8, (120, 100), seed=4)
    _image_folder(folder / "imagenet" / "val", classes, 4, (120, 100), seed=5)


def kitti(folder: Path) -> None:
    """``Kitti/training/{image_2,semantic}/*.png``: five small images and label masks (ids 0..33)."""
    from PIL import Image

    rng = np.random.default_rng(6)
    for sub in ("image_2", "semantic"):
        (folder / "Kitti" / "training" / sub).mkdir(parents=True, exist_ok=True)
    for i in range(5):
        Image.fromarray(_images(rng, 1, (32, 96, 3))[0]).save(folder / "Kitti" / "training" / "image_2" / f"{i}.png")
        mask = rng.integers(0, 34, size=(32, 96), dtype=np.uint8)
        Image.fromarray(mask, mode="L").save(folder / "Kitti" / "training" / "semantic" / f"{i}.png")


def torchvision_weights(folder: Path, names: tuple[str, ...] = ("resnet18", "resnet50")) -> None:
    """``hub/checkpoints/<file>``: each model's random weights under the name its DEFAULT weights download to,
    so ``weights="DEFAULT"`` loads them from the cache instead of the network (set ``TORCH_HOME=folder``)."""
    import torch
    from torchvision import models

    out = folder / "hub" / "checkpoints"
    out.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        torch.manual_seed(100 + i)
        weights = models.get_model_weights(name).DEFAULT
        torch.save(models.get_model(name, weights=None).state_dict(), out / os.path.basename(weights.url))


MAKERS = {
    "mnist": mnist_raw,
    "cifar10": cifar10,
    "wikitext2": wikitext2,
    "cats_and_dogs": cats_and_dogs,
    "imagenet": imagenet,
    "kitti": kitti,
    "weights": torchvision_weights,
}


def made(cache: Path, what: str) -> Path:
    """The folder holding ``what``, made on first use."""
    folder = cache / what
    if not (folder / ".done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        MAKERS[what](folder)
        (folder / ".done").touch()
    return folder


def place(cache: Path, what: str, into: Path) -> None:
    """Copy ``what`` into ``into`` (hard links where the file system allows: the files are only read)."""
    source = made(cache, what)
    for path in source.rglob("*"):
        if path.is_file() and path.name != ".done":
            target = into / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
