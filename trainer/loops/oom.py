"""A CUDA out-of-memory error that says where it happened and what the memory was.

torch's message names the allocation that failed; with it a user still has to find out which
stage, epoch and step ran, how big that batch was, and how much memory the process held of how
much the card has. The stage's frame (``lifecycle.running``) re-raises the error with those facts;
nothing is saved on the way out, so the run's checkpoints stay as they were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.view import TrainerView

GIB = 1024**3


def explain_out_of_memory(trainer: TrainerView, exc: BaseException) -> torch.OutOfMemoryError | None:
    """A clearer ``OutOfMemoryError`` for ``exc``, or None when it is not one."""
    if not isinstance(exc, torch.OutOfMemoryError):
        return None
    state = trainer.state
    stage = state.stage or state.fn or "?"
    batch = trainer.metric_log.results.batch
    shapes = batch_shapes(batch) if batch is not None else "not known (outside a step)"
    device = trainer.strategy.root_device
    return torch.OutOfMemoryError(
        f"out of memory in stage '{stage}' at epoch {trainer.current_epoch}, global step {trainer.global_step}; "
        f"batch: {shapes}; {memory_report(device)}. Lower the batch size, use precision='bf16-mixed', or "
        f"accumulate_grad_batches. The run's checkpoints were left as they were. torch said: {exc}"
    )


def batch_shapes(batch: Any) -> str:
    """The tensors of a batch as ``shape dtype`` (a nested structure keeps its brackets and keys)."""
    if isinstance(batch, torch.Tensor):
        return f"{tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}"
    if isinstance(batch, dict):
        return "{" + ", ".join(f"{k!r}: {batch_shapes(v)}" for k, v in batch.items()) + "}"
    if isinstance(batch, list | tuple):
        return "[" + ", ".join(batch_shapes(v) for v in batch) + "]"
    return type(batch).__name__


def memory_report(device: torch.device) -> str:
    """What this process holds on ``device`` and what the card has (CUDA only; a read never allocates)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"device {device}: no CUDA memory figures"
    index = device.index if device.index is not None else torch.cuda.current_device()
    allocated = torch.cuda.memory_allocated(index) / GIB
    reserved = torch.cuda.memory_reserved(index) / GIB
    peak = torch.cuda.max_memory_allocated(index) / GIB
    free, total = (x / GIB for x in torch.cuda.mem_get_info(index))
    return (
        f"{device} ({torch.cuda.get_device_name(index)}): this process holds {allocated:.2f} GiB in tensors "
        f"({reserved:.2f} GiB reserved by the caching allocator, peak {peak:.2f} GiB); the card has "
        f"{total:.2f} GiB, {free:.2f} GiB free"
    )
