"""Out-of-memory errors, recognised as Lightning recognises them, so the batch-size finder tells a trial that
ran out of memory from one that failed otherwise."""

from __future__ import annotations

import gc

import torch

_OOM_MESSAGES = (
    "out of memory",  # CUDA ("CUDA out of memory"), MPS, and CPU allocators that say so
    "DefaultCPUAllocator: can't allocate memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",  # what cuDNN raises when it runs out (pytorch#4107)
)


def is_oom_error(exception: BaseException) -> bool:
    """Whether ``exception`` (or the error it was raised from) says the device or host ran out of memory."""
    seen: BaseException | None = exception
    while seen is not None:
        if isinstance(seen, torch.cuda.OutOfMemoryError):
            return True
        if isinstance(seen, RuntimeError) and any(text in str(seen) for text in _OOM_MESSAGES):
            return True
        seen = seen.__cause__
    return False


def garbage_collection_cuda() -> None:
    """Free what a failed attempt left: Python's garbage, then CUDA's cached blocks."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
