"""What seeding each sample costs (exact resume with augmentation in DataLoader workers).

With ``num_workers > 0`` the Trainer seeds the torch, ``random`` and ``numpy`` generators from
(data seed, epoch, index) before each ``dataset[index]`` (``trainer.data.sample_seeds``). This
measures that cost per sample in one process, as a worker pays it: a plain ``dataset[i]`` loop
against the same loop through ``SeededDataset``, in rotated interleaved rounds, reporting the
median of the per-round ratios and the extra microseconds per sample. Two datasets: one that only
indexes tensors (the worst case: the seeding is all the work) and one with a small augmentation.

    python benchmarks/sample_seeds.py [--samples 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from interleave import interleaved
from torch.utils.data import Dataset, TensorDataset

from trainer.data.sample_seeds import SampleKey, SeededDataset


class Augmented(Dataset[Any]):
    """A 3x64x64 image with noise and a random flip: a small, typical augmentation."""

    def __init__(self, n: int) -> None:
        self.images = torch.randn(64, 3, 64, 64)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        image = self.images[i % 64] + 0.05 * torch.randn(3, 64, 64)
        return image.flip(-1) if torch.rand(()) < 0.5 else image


def timed(read: Callable[[int], Any], n: int) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        for i in range(n):
            read(i)
        return time.perf_counter() - start

    return run


def measure(name: str, dataset: Dataset[Any], n: int, rounds: int) -> None:
    seeded = SeededDataset(dataset, data_seed=1234)
    plain, ours = interleaved(timed(dataset.__getitem__, n), timed(lambda i: seeded[SampleKey(3, i)], n), rounds)
    ratios = [o / p for p, o in zip(plain, ours)]
    extra_us = statistics.median((o - p) / n * 1e6 for p, o in zip(plain, ours))
    print(
        f"{name:<22} plain {statistics.median(plain) / n * 1e6:8.2f} us/sample   seeded "
        f"{statistics.median(ours) / n * 1e6:8.2f} us/sample   ratio {statistics.median(ratios):.3f}   "
        f"extra {extra_us:.2f} us/sample"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    measure("index only (worst)", TensorDataset(torch.randn(args.samples, 16)), args.samples, args.rounds)
    measure("3x64x64 augmentation", Augmented(args.samples), args.samples // 4, args.rounds)


if __name__ == "__main__":
    main()
