"""Validate two uneven loaders (13 and 7 samples) on 2 self-launched ranks; each rank saves what it got.

python several_loaders.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tests.models import quiet
from tests.test_several_loaders import PerLoader, loaders


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    fit = quiet(out, strategy="ddp", devices=2)
    results = fit.validate(PerLoader(), loaders(), verbose=False)
    torch.save(results, out / f"results-rank{fit.global_rank}.pt")


if __name__ == "__main__":
    main()
