"""Seeding and RNG snapshots: the RNG states a checkpoint needs for an exact resume."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import torch

from trainer.exceptions import MisconfigurationException


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed python, numpy and torch (CPU and every CUDA device); returns the seed.

    ``seed=None`` takes the seed an earlier call exported (``PL_GLOBAL_SEED``, as Lightning's; a DDP rank inherits
    its parent's), else 0. The seed, and ``workers`` as ``PL_SEED_WORKERS``, are exported to child processes as
    Lightning exports them; each DataLoader sample already draws from its own seed (``trainer.data.sample_seeds``).
    ``verbose`` prints ``Seed set to N`` to stderr. A seed outside [0, 2**32) is refused (Lightning warns and uses 0).
    """
    if seed is None:
        exported = os.environ.get("PL_GLOBAL_SEED")
        try:
            seed = 0 if exported is None else int(exported)
        except ValueError:
            raise MisconfigurationException(f"Invalid seed specified via PL_GLOBAL_SEED: {exported!r}") from None
    if isinstance(seed, bool) or not isinstance(seed, int) or not (0 <= seed < 2**32):
        raise MisconfigurationException(f"seed={seed!r} must be an int in [0, 2**32).")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    os.environ["PL_SEED_WORKERS"] = str(int(workers))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if verbose and int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))) == 0:
        print(f"Seed set to {seed}", file=sys.stderr, flush=True)  # Lightning logs it to stderr
    return seed


def rng_state() -> dict[str, Any]:
    """Every process-global RNG, as tensors and plain values a weights-only load accepts."""
    legacy = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    kind, keys, pos, has_gauss, cached = legacy
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Draws made inside leave python's, numpy's and torch's generators as they were on entry (also
    when the block raises), as Lightning's ``isolate_rng``; ``include_cuda=False`` leaves CUDA's out."""
    state = rng_state()
    if not include_cuda:
        state.pop("cuda", None)
    try:
        yield
    finally:
        set_rng_state(state)
