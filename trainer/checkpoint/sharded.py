"""Sharded checkpoints: a ``torch.distributed.checkpoint`` (DCP) directory where every rank writes its shards.

Layout of ``<name>.ckpt/``: DCP's ``__<rank>_<i>.distcp`` files hold the tensors of the weights and
optimizer states (each rank only its shards); ``meta.pt``, written by rank 0 with our atomic
``save_checkpoint``, holds everything else (progress, every rank's RNG, callbacks, optimizer
hyper-parameters), with a ``{"__dcp__": key}`` reference where a tensor was. DCP writes
``.metadata`` last, so a directory with ``.metadata`` is complete. The directory is written under
``.<name>.ckpt.tmp-<pid>-<host>`` and renamed by rank 0 once every rank is done, so a kill at any
time leaves the previous checkpoint whole. Loading unpickles nothing but DCP's own metadata
classes (an allowlist) and ``meta.pt`` with ``weights_only=True``.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import sys
import threading
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

# torch.distributed.checkpoint is imported where it is used: it pulls in DTensor and dynamo (seconds),
# which a run whose checkpoints are plain files (every strategy but fsdp) must not pay.
from trainer.checkpoint.io import (
    CheckpointError,
    clone_file,
    link_checkpoint,
    load_checkpoint,
    save_checkpoint,
    symlink_or_clone,
)
from trainer.checkpoint.leftovers import finished, temporary, under_way
from trainer.checkpoint.shard_digests import check_shards, digesting_writer

META = "meta.pt"
DCP_METADATA = ".metadata"
_TENSOR_PARTS = ("state_dict", "optimizer_states")  # the parts whose tensors DCP writes, sharded
_REF = "__dcp__"


class Ranks(Protocol):
    """The strategy's collectives a sharded save needs."""

    @property
    def is_global_zero(self) -> bool: ...
    def barrier(self) -> None: ...
    def broadcast(self, obj: Any, src: int = 0) -> Any: ...


# ---- what a path is ------------------------------------------------------------------------------------
def is_complete_checkpoint_dir(path: str | os.PathLike[str]) -> bool:
    """A sharded checkpoint directory whose save finished (DCP writes ``.metadata`` last)."""
    path = Path(path)
    return path.is_dir() and (path / DCP_METADATA).is_file() and (path / META).is_file()


def is_checkpoint_path(path: Path) -> bool:
    """A checkpoint file or a sharded checkpoint directory (complete or not: loading says what is missing)."""
    return path.is_file() or path.is_dir()


# ---- saving --------------------------------------------------------------------------------------------
def save_sharded(checkpoint: dict[str, Any], path: Path, ranks: Ranks, async_save: bool = False) -> None:
    """Collective: rank 0 writes ``meta.pt``, every rank its shards, then rank 0 renames the directory in place.

    With ``async_save`` the shards are written by a background thread after this returns; the
    directory appears when that finishes (``wait_pending()`` waits for it).
    """
    wait_pending()
    path = Path(path)
    tmp = Path(ranks.broadcast(str(temporary_name(path))))  # one name on every rank: rank 0's
    tensors: dict[str, torch.Tensor] = {}
    meta = {k: _split(v, k, tensors) if k in _TENSOR_PARTS else v for k, v in checkpoint.items()}
    if ranks.is_global_zero:
        _remove(tmp)
        tmp.mkdir(parents=True)
        save_checkpoint(meta, tmp / META)
    ranks.barrier()
    if async_save:
        import torch.distributed.checkpoint as dcp

        future = dcp.async_save(tensors, storage_writer=digesting_writer(tmp), process_group=_async_group())
        _start_pending(future, tmp, path, ranks.is_global_zero)
        return
    with under_way(tmp, path):
        try:
            with warnings.catch_warnings():  # one process without a group: "assuming ... a single process"
                warnings.filterwarnings("ignore", message=".*in a single process.*")
                import torch.distributed.checkpoint as dcp

                dcp.save(tensors, storage_writer=digesting_writer(tmp))
        except BaseException:
            if ranks.is_global_zero:
                _remove(tmp)
            raise
        if ranks.is_global_zero:
            publish(tmp, path)
    ranks.barrier()


def temporary_name(path: Path, tag: str = "") -> Path:
    return temporary(path, tag)


def publish(tmp: Path, path: Path) -> None:
    """Put the finished directory ``tmp`` at ``path``; an older checkpoint there goes only afterwards.

    Over an existing checkpoint the two are swapped in one step (Linux ``renameat2(RENAME_EXCHANGE)``),
    so ``path`` is never missing; elsewhere it is renamed away first, a moment without ``path``.
    """
    if not (path.exists() or path.is_symlink()):
        os.replace(tmp, path)
    elif _exchange(tmp, path):
        _remove(tmp)  # now the old checkpoint
    else:
        old = temporary_name(path, ".old")
        _remove(old)
        os.replace(path, old)
        os.replace(tmp, path)
        _remove(old)
    finished(path)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the platform cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return int(renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)) == 0


def remove_checkpoint(path: str | os.PathLike[str]) -> None:
    """Delete a checkpoint file or directory; a directory is renamed first, so it never looks half there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        wait_pending()
        gone = temporary_name(path, ".old")
        os.replace(path, gone)
        _remove(gone)
    else:
        path.unlink(missing_ok=True)


def link_any_checkpoint(source: str | os.PathLike[str], target: str | os.PathLike[str], symlink: bool = False) -> None:
    """``target`` becomes the checkpoint ``source`` is, a file (``io.link_checkpoint``) or a directory: a copy of
    its own, or with ``symlink`` a symbolic link."""
    wait_pending()  # an asynchronous save of ``source`` must be in place first
    if Path(source).is_dir():
        link_checkpoint_dir(Path(source), Path(target), symlink)
    else:
        link_checkpoint(source, target, symlink)


def link_checkpoint_dir(source: Path, target: Path, symlink: bool = False) -> None:
    """``target`` becomes a copy of the directory ``source``, file by file (``io.clone_file``: a reflink where the
    filesystem has them), or a relative symbolic link to it; never hard links a user's copy could write through."""
    wait_pending()
    tmp = temporary_name(target)
    _remove(tmp)
    try:
        if symlink:
            symlink_or_clone(source, tmp)
        else:
            shutil.copytree(source, tmp, copy_function=clone_file)
        publish(tmp, target)
    except OSError as err:
        _remove(tmp)
        raise CheckpointError(f"could not make {target} from {source}: {err}") from err


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _split(obj: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """``obj`` with each tensor replaced by a reference; the tensors go to ``tensors`` under their path."""
    if isinstance(obj, torch.Tensor):
        tensors[key] = obj
        return {_REF: key}
    if isinstance(obj, dict):
        return {k: _split(v, f"{key}/{k}", tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_split(v, f"{key}/{i}", tensors) for i, v in enumerate(obj)]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


# ---- async saves ---------------------------------------------------------------------------------------
class _Pending:
    def __init__(self, future: Future[Any], tmp: Path, path: Path, publishes: bool) -> None:
        self.future, self.tmp, self.path, self.publishes = future, tmp, path, publishes
        self.done = threading.Event()
        self.error: BaseException | None = None
        future.add_done_callback(self._finish)

    def _finish(self, future: Future[Any]) -> None:
        try:
            future.result()
            if self.publishes:
                publish(self.tmp, self.path)
        except BaseException as err:  # re-raised by wait()
            self.error = err
        finally:
            self.done.set()

    def wait(self) -> None:
        self.done.wait()
        if self.error is not None:
            raise CheckpointError(f"the asynchronous save of {self.path} failed: {self.error}") from self.error


_pending: _Pending | None = None
_group: Any = None


def _start_pending(future: Any, tmp: Path, path: Path, publishes: bool) -> None:
    global _pending
    if not isinstance(future, Future):  # AsyncSaveResponse (staging and upload as two futures)
        future = future.upload_completion
    _pending = _Pending(future, tmp, path, publishes)


def track_pending(future: Future[Any], path: Path) -> None:
    """A write of ``path`` that another writer runs in the background (``AsyncCheckpointIO``): linking or removing
    a checkpoint, and the next save, wait for it first (``wait_pending``)."""
    global _pending
    wait_pending()
    _pending = _Pending(future, path, path, publishes=False)


def wait_pending() -> None:
    """Wait for the asynchronous save in flight, if any, and its rename into place."""
    global _pending
    pending, _pending = _pending, None
    if pending is not None:
        pending.wait()


def _async_group() -> Any:
    """A gloo group of its own: the background save's collectives must not interleave with training's."""
    global _group
    if _group is None:
        _group = dist.new_group(backend="gloo")
    return _group


# ---- loading -------------------------------------------------------------------------------------------
def load_sharded(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole checkpoint in full (unsharded) CPU tensors, read by this process alone."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    path = Path(path)
    _check_complete(path)
    check_shards(path)
    meta = load_checkpoint(path / META)
    reader = _safe_reader(path)
    stored = reader.read_metadata().state_dict_metadata
    keys = sorted(_refs(meta))
    missing = [k for k in keys if not isinstance(stored.get(k), TensorStorageMetadata)]
    if missing:
        raise CheckpointError(f"{path}: the DCP files lack {len(missing)} tensor(s) meta.pt names: {missing[:5]}")
    tensors = {k: _empty(stored[k]) for k in keys}  # type: ignore[arg-type]
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message=".*in a single process.*")
        dcp.load(tensors, storage_reader=reader, no_dist=True)
    return _join(meta, tensors)  # type: ignore[no-any-return]


def _check_complete(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"Checkpoint not found: {path}")
    lacking = [name for name in (DCP_METADATA, META) if not (path / name).is_file()]
    if not lacking:
        return
    if len(lacking) == 2 and not any(path.glob("*.distcp")):  # no part of a sharded save: some other folder
        held = sorted(p.name for p in path.glob("*.ckpt"))
        where = f"it holds {', '.join(held[:5])}: pass one of them" if held else "pass a checkpoint file"
        raise CheckpointError(
            f"{path} is a folder, not a file or a sharded checkpoint (no {DCP_METADATA}, no {META}); {where}, or "
            "ckpt_path='last' for the newest complete checkpoint of the run."
        )
    raise CheckpointError(
        f"{path} is not a complete sharded checkpoint: it has no {' and no '.join(lacking)} (a save that was "
        "killed, or a copy that did not finish). Use another checkpoint."
    )


def _empty(info: TensorStorageMetadata) -> torch.Tensor:
    return torch.empty(info.size, dtype=info.properties.dtype)


def _refs(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        if set(obj) == {_REF}:
            return {obj[_REF]}
        return set().union(*(_refs(v) for v in obj.values()))
    if isinstance(obj, (list, tuple)):
        return set().union(*(_refs(v) for v in obj))
    return set()


def _join(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_REF}:
            return tensors[obj[_REF]]
        return {k: _join(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_join(v, tensors) for v in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


class _MetadataUnpickler(pickle.Unpickler):
    """DCP pickles its ``.metadata``; this admits only the classes DCP's metadata is made of."""

    _ALLOWED = {
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("pathlib", "PosixPath"),
        ("pathlib", "WindowsPath"),
        ("collections", "OrderedDict"),
    }

    def find_class(self, module: str, name: str) -> Any:
        allowed = (module, name) in self._ALLOWED or module == "torch.distributed.checkpoint.metadata"
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            allowed = True
        if not allowed:
            raise CheckpointError(f"refused DCP metadata that needs {module}.{name} (not a DCP metadata class)")
        return super().find_class(module, name)


def _safe_reader(path: Path) -> FileSystemReader:
    """DCP's file reader, its pickled ``.metadata`` read through ``_MetadataUnpickler``."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
            with open(Path(self.path) / DCP_METADATA, "rb") as f:
                metadata: Metadata = _MetadataUnpickler(f).load()
            if getattr(metadata, "storage_meta", None) is not None:
                metadata.storage_meta.load_id = self.load_id  # type: ignore[union-attr]
            return metadata

    return SafeReader(path)


# ---- consolidation -------------------------------------------------------------------------------------
def consolidate(directory: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the module weights of a sharded checkpoint as one plain ``torch.save`` file (a state_dict)."""
    weights = load_sharded(directory)["state_dict"]
    out = Path(out)
    save_checkpoint(dict(weights), out)
    return out


__all__: list[str] = [
    "consolidate",
    "is_complete_checkpoint_dir",
    "link_any_checkpoint",
    "link_checkpoint_dir",
    "load_sharded",
    "remove_checkpoint",
    "save_sharded",
    "wait_pending",
]
