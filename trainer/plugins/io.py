"""Lightning's ``CheckpointIO`` plugins: how a checkpoint file is written, read and removed.

``TorchCheckpointIO`` is steadytrain's own writer (atomic: a crash leaves the old file or the new one,
never half of one; digests checked on load). ``AsyncCheckpointIO`` runs another ``CheckpointIO``'s writes
in a background thread; training goes on while the file is written, still atomically. A sharded (FSDP)
checkpoint directory is written by the strategy itself.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from trainer.exceptions import MisconfigurationException

PathLike = str | os.PathLike[str]


class CheckpointIO(ABC):
    """Writes, reads and removes checkpoint files; ``Trainer(plugins=[MyIO()])`` replaces the default."""

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path``."""

    @abstractmethod
    def load_checkpoint(self, path: PathLike, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        """Read the checkpoint at ``path``."""

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete the checkpoint at ``path``."""

    def teardown(self) -> None:
        """The stage ended: finish what is pending."""


class TorchCheckpointIO(CheckpointIO):
    """``torch.save`` written atomically (temporary file, fsync, rename), read back with its digests checked."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"TorchCheckpointIO.save_checkpoint takes no storage_options (got {storage_options!r}); "
                "write your own CheckpointIO to use them."
            )
        from trainer.checkpoint.io import save_checkpoint

        save_checkpoint(dict(checkpoint), path)

    def load_checkpoint(self, path: PathLike, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        from trainer.checkpoint.io import load_checkpoint

        return load_checkpoint(path, map_location=map_location or "cpu", weights_only=weights_only)

    def remove_checkpoint(self, path: PathLike) -> None:
        from trainer.checkpoint.sharded import remove_checkpoint

        remove_checkpoint(path)


class AsyncCheckpointIO(CheckpointIO):
    """Runs ``checkpoint_io``'s saves (default: ``TorchCheckpointIO``) in one background thread.

    The tensors are copied first, so the training steps that follow never change a checkpoint being
    written. A later save, a link to the file (``last.ckpt``), its removal and the stage's end wait for
    the write; a failed write raises there.
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        if checkpoint_io is not None and not isinstance(checkpoint_io, CheckpointIO):
            raise MisconfigurationException(
                f"AsyncCheckpointIO(checkpoint_io={checkpoint_io!r}) must wrap a CheckpointIO, "
                "e.g. TorchCheckpointIO()."
            )
        self.checkpoint_io = checkpoint_io if checkpoint_io is not None else TorchCheckpointIO()
        self._executor: ThreadPoolExecutor | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        from lightning_utilities.core.apply_func import apply_to_collection

        from trainer.checkpoint.sharded import track_pending

        snapshot = apply_to_collection(checkpoint, torch.Tensor, lambda t: t.detach().clone())
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steadytrain-async-save")
        future: Future[None] = self._executor.submit(
            self.checkpoint_io.save_checkpoint, snapshot, path, storage_options
        )
        track_pending(future, Path(path))

    def load_checkpoint(self, path: PathLike, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        self._wait()
        return self.checkpoint_io.load_checkpoint(path, map_location, weights_only)

    def remove_checkpoint(self, path: PathLike) -> None:
        self._wait()
        self.checkpoint_io.remove_checkpoint(path)

    def _wait(self) -> None:
        from trainer.checkpoint.sharded import wait_pending

        wait_pending()

    def teardown(self) -> None:
        """Wait for the write in flight and stop the thread (a failed write raises here)."""
        try:
            self._wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
        self.checkpoint_io.teardown()


class XLACheckpointIO(TorchCheckpointIO):
    """TPU checkpoints through torch_xla: not supported. Named so a port that imports it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(
            "XLACheckpointIO: steadytrain does not run on TPUs (XLA); use TorchCheckpointIO (the default)."
        )
