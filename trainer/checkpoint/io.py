"""Checkpoint files: atomic save, safe load, and weights that load into any wrapper.

Saves go to a temporary file that is renamed over the target, so a crash never leaves a torn
checkpoint and never costs the previous good one. Loads always use ``weights_only=True``: a
checkpoint is data, and a downloaded file must not be able to run code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.checkpoint import leftovers
from trainer.checkpoint.errors import CheckpointError
from trainer.checkpoint.leftovers import finished, temporary
from trainer.checkpoint.verify import WriteDigests, load_verified

PathLike = str | os.PathLike[str]
_PREFIXES = ("module.", "_orig_mod.")
_STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "net")
_SHOW = 10
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint writes it once every shard is in


def save_checkpoint(state: dict[str, Any], path: PathLike) -> None:
    """Write ``state`` atomically: the target is either the old file or the complete new one.

    A write that fails (full disk, quota, a vanished mount) leaves every earlier checkpoint as
    it was and raises ``CheckpointError`` naming the file and the free space.
    """
    path = Path(path)
    tmp = temporary(path)
    stream: _Recording | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with leftovers.under_way(tmp, path):
            with open(tmp, "w+b") as f:
                stream = _Recording(f)
                torch.save(state, stream)  # type: ignore[arg-type]
                stream.digests.append_to(f)  # what every load checks the records against
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        tmp.unlink(missing_ok=True)
        cause = stream.error if stream is not None and stream.error is not None else err
        raise could_not_write(path, cause) from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finished(path)
    _fsync_dir(path.parent)


def link_checkpoint(source: PathLike, target: PathLike, symlink: bool = False) -> None:
    """Make ``target`` the checkpoint ``source`` is, atomically (``last.ckpt`` beside a top-k file).

    ``target`` is a file of its own (``clone_file``), never a hard link: ``cp`` or ``torch.save`` over
    ``last.ckpt`` must not rewrite another checkpoint. With ``symlink`` it is a relative symbolic link,
    as Lightning's ``save_last="link"`` makes (a copy where links are not allowed). Deleting ``source``
    later (it fell out of the top k) leaves a copy whole.
    """
    source, target = Path(source), Path(target)
    tmp = temporary(target)
    tmp.unlink(missing_ok=True)
    try:
        if symlink:
            symlink_or_clone(source, tmp)
        else:
            clone_file(source, tmp)
        os.replace(tmp, target)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise could_not_write(target, err) from err
    finished(target)
    _fsync_dir(target.parent)


def symlink_or_clone(source: Path, link: Path) -> None:
    """A relative symbolic link ``link`` to ``source``; a copy where the OS refuses links (Windows users)."""
    try:
        os.symlink(os.path.relpath(source, link.parent), link, target_is_directory=source.is_dir())
    except OSError:
        if source.is_dir():
            shutil.copytree(source, link, copy_function=clone_file)
        else:
            clone_file(source, link)


def clone_file(source: PathLike, target: PathLike) -> None:
    """Copy ``source`` to the new file ``target``, on disk when this returns: a reflink where the filesystem
    has them (btrfs, XFS: the blocks are shared until either file is written, and nothing is copied), else
    the kernel's own copy (``copy_file_range``, server-side on NFS 4.2), else read and write."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        if not _reflink(src.fileno(), dst.fileno()):
            _copy(src, dst)
        os.fsync(dst.fileno())


_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


def _reflink(src: int, dst: int) -> bool:
    try:
        import fcntl

        fcntl.ioctl(dst, _FICLONE, src)
    except (ImportError, OSError):  # ext4, tmpfs, NFS, Windows: no reflinks
        return False
    return True


def _copy(src: Any, dst: Any) -> None:
    size, done = os.fstat(src.fileno()).st_size, 0
    with contextlib.suppress(OSError, AttributeError):  # no copy_file_range here: read and write the rest
        while done < size:
            copied = os.copy_file_range(src.fileno(), dst.fileno(), size - done, done, done)
            if copied == 0:
                break
            done += copied
    src.seek(done)
    dst.seek(done)
    shutil.copyfileobj(src, dst, 1 << 20)


class _Recording:
    """A file torch.save writes through, keeping the OS error its zip writer would hide behind
    'enforce fail at inline_container.cc' (a full disk, a quota, a vanished mount)."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.error: OSError | None = None
        self.digests = WriteDigests()

    def write(self, data: bytes) -> int:
        try:
            self.digests.add(data)
            return int(self.file.write(data))
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.file.flush()


_UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}


def could_not_write(path: Path, err: BaseException) -> CheckpointError:
    """A failed save, said the one way (torch.save reports a full disk as 'enforce fail at inline_container.cc')."""
    try:
        free = f"{shutil.disk_usage(path.parent).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    if getattr(err, "errno", None) in _UNWRITABLE:
        advice = (
            "Make the folder writable again (was it remounted read-only, or its permissions changed?) or point "
            "ModelCheckpoint(dirpath=...) / default_root_dir to a folder you can write to, then resume with "
            "ckpt_path='last'."
        )
    else:
        advice = "Free space or point ModelCheckpoint(dirpath=...) / default_root_dir to a filesystem with room."
    return CheckpointError(
        f"could not write checkpoint {path} ({free} on its filesystem): {type(err).__name__}: {str(err)[:200]}. "
        f"Earlier checkpoints are untouched. {advice}"
    )


def unwritable_reason(folder: PathLike) -> str | None:
    """Why files cannot be created in ``folder`` (or in its nearest existing parent), or None.

    Checked at fit start, so a read-only or mistyped folder fails before hours of training
    rather than at the first checkpoint. Creates and removes one empty temporary file.
    """
    existing = Path(folder).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        return f"cannot create files in {existing}: {err.strerror or err}"
    return None


def _fsync_dir(dirpath: Path) -> None:
    """Make the rename itself durable; best effort where directories cannot be fsynced."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def to_safe(obj: Any) -> Any:
    """Numpy arrays/scalars (numpy RNG state) -> tensors/numbers, so weights_only can load them.

    Containers are rebuilt only where something changed: state dicts keep their ``_metadata``.
    """
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.array(obj, copy=True))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        new = {k: to_safe(v) for k, v in obj.items()}
        changed = any(new[k] is not v for k, v in obj.items())
        return new if changed else obj
    if isinstance(obj, (list, tuple)):
        items = [to_safe(v) for v in obj]
        changed = any(a is not b for a, b in zip(items, obj))
        return (tuple(items) if isinstance(obj, tuple) else items) if changed else obj
    return obj


def load_checkpoint(
    path: PathLike, map_location: Any = "cpu", trusted_classes: Sequence[type] = (), weights_only: bool | None = True
) -> dict[str, Any]:
    """Load with ``weights_only=True`` (None means the same); ``trusted_classes`` allowlists your own classes for
    this call. ``weights_only=False`` unpickles anything the file holds: only for files you trust."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Checkpoint not found: {path}")
    with torch.serialization.safe_globals(list(trusted_classes)):
        try:
            obj = load_verified(path, map_location, weights_only=weights_only is not False)
        except pickle.UnpicklingError as err:
            raise _unpickling_error(path, err) from err
        except (PermissionError, IsADirectoryError, FileNotFoundError, CheckpointError):
            raise  # the OS message is clear; ours names the damaged records
        except Exception as err:  # a cut-off zip raises OSError(EINVAL) from torch's reader
            raise CheckpointError(_not_a_checkpoint(path, err)) from err
    if not isinstance(obj, dict):
        raise CheckpointError(f"Checkpoint {path} holds a {type(obj).__name__}, expected a dict.")
    return obj


def _unpickling_error(path: Path, err: Exception) -> CheckpointError:
    """Tell a refused pickle payload (name what it wanted) from a corrupted file."""
    names: list[str] = []
    with contextlib.suppress(Exception):
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    # torch's wordings: "GLOBAL x was not an allowed global", "unsupported GLOBAL x whose module m is blocked"
    names = names or re.findall(r"GLOBAL ([\w.]+) (?:was not an allowed global|whose module)", str(err))
    if not names:  # keep torch's reason, not its advice to retry with weights_only=False
        reason = re.search(r"WeightsUnpickler error:\s*(.+)", str(err))
        return CheckpointError(_not_a_checkpoint(path, err, reason[1] if reason else None))
    return CheckpointError(
        f"Refused to load {path}: it needs globals outside the weights_only allowlist "
        f"({', '.join(sorted(set(names)))}); the file was NOT executed. If you trust it, allow your "
        "classes with load_checkpoint(path, trusted_classes=[MyClass]) or "
        "torch.serialization.add_safe_globals([MyClass])."
    )


def _not_a_checkpoint(path: Path, err: Exception, reason: str | None = None) -> str:
    size = path.stat().st_size if path.is_file() else 0
    state = "empty" if size == 0 else "cut off before its end" if not looks_complete(path) else "corrupted"
    return (
        f"{path} ({size} bytes) is not a readable torch checkpoint: it looks {state} (a copy or download that "
        f"did not finish, or not written by torch.save): {type(err).__name__}: {(reason or str(err))[:200]}. "
        "Use another checkpoint: ckpt_path='last' picks the newest complete one."
    )


def clean_stale_temporaries(dirpath: PathLike, max_age_s: float = leftovers.MAX_AGE_S) -> list[Path]:
    """Remove what killed saves left in ``dirpath`` when their writer is gone (``leftovers.clean``)."""
    return leftovers.clean(dirpath, max_age_s)


def looks_complete(p: Path) -> bool:
    """Cheap check against copies that did not finish: an empty file, a zip cut before its end, or a
    directory without the ``.metadata`` that torch.distributed.checkpoint writes when all shards are in."""
    if p.is_dir():
        return (p / DCP_METADATA).is_file()
    with open(p, "rb") as f:
        head = f.read(4)
    return bool(head) and (head != b"PK\x03\x04" or zipfile.is_zipfile(p))


def strip_prefixes(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Drop ``module.`` (DDP/DP) and ``_orig_mod.`` (torch.compile) prefixes, in any nesting."""
    *_, stripped = _strip_steps(state_dict)
    return stripped


def _strip_steps(state_dict: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield the dict, then each one-prefix-shorter version; a prefix goes only if every key has it.

    Stripping per key would break a model with a real submodule called ``module``.
    """
    current = dict(state_dict)
    yield current
    while current:
        prefix = next((p for p in _PREFIXES if all(k.startswith(p) for k in current)), None)
        if prefix is None:
            return
        current = {k[len(prefix) :]: v for k, v in current.items()}
        yield current


def extract_state_dict(obj: Any) -> dict[str, torch.Tensor]:
    """The model weights in a full checkpoint, a bare state_dict, or a {"model": ...}-style dict."""
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"Expected a checkpoint dict or state_dict, got {type(obj).__name__}.")
    for key in _STATE_DICT_KEYS:
        if isinstance(obj.get(key), Mapping):
            return extract_state_dict(obj[key])
    # A bare state_dict: tensors, plus whatever ``get_extra_state`` returned. Plain values saved
    # beside the weights (a training script's ``sd["mask_values"] = [0, 1]``) are not weights.
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor) or str(k).endswith("_extra_state")}
    if tensors and all(isinstance(k, str) for k in obj):
        return tensors
    keys = list(obj)
    raise CheckpointError(
        f"Found no model weights: no {'/'.join(_STATE_DICT_KEYS)} key and not a bare state_dict "
        f"of tensors. Keys found ({len(keys)}): {_first_few(keys)}"
    )


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DataParallel / DistributedDataParallel / torch.compile wrappers."""
    wrappers = (nn.DataParallel, nn.parallel.DistributedDataParallel)
    while True:
        if isinstance(model, wrappers):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = getattr(model, "_orig_mod")  # noqa: B009  (nn.Module attribute typing)
        else:
            return model


def load_weights(
    model: nn.Module, source: PathLike | Mapping[str, Any], strict: bool = True
) -> tuple[list[str], list[str]]:
    """Load weights from a path or dict into ``model`` (wrapped or not); return (missing, unexpected).

    Nothing is loaded if a shape differs, or, with ``strict``, if any key is missing or unexpected.
    """
    where = f" from {source}" if isinstance(source, (str, os.PathLike)) else ""
    obj = load_checkpoint(source) if isinstance(source, (str, os.PathLike)) else source
    target = unwrap_model(model)
    own = target.state_dict()
    weights = max(_strip_steps(extract_state_dict(obj)), key=lambda sd: len(own.keys() & sd.keys()))
    _check_shapes(weights, own, where)
    missing = [k for k in own if k not in weights]
    unexpected = [k for k in weights if k not in own]
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"Weights{where} do not match the model (pass strict=False to load the matching keys)."
            + _keys(missing, unexpected)
        )
    result = target.load_state_dict(weights, strict=strict)  # strict here only when nothing is missing or extra
    if isinstance(result, tuple):  # torch's (missing, unexpected); an override may return nothing
        return list(result[0]), list(result[1])
    return missing, unexpected


def _check_shapes(weights: Mapping[str, Any], own: Mapping[str, Any], where: str) -> None:
    bad = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in weights.items()
        if isinstance(v, torch.Tensor) and isinstance(own.get(k), torch.Tensor) and v.shape != own[k].shape
    ]
    if bad:
        raise CheckpointError(f"Shape mismatch in {len(bad)} key(s){where}: " + "; ".join(bad))


def _keys(missing: list[str], unexpected: list[str]) -> str:
    """The keys that differ, in torch's words (which ported code may match), with how many."""
    said = f" Missing key(s) in state_dict: {_first_few(missing, True)} ({len(missing)}, not in the checkpoint)."
    extra = f" Unexpected key(s) in state_dict: {_first_few(unexpected, True)} ({len(unexpected)}, not in the model)."
    return (said if missing else "") + (extra if unexpected else "")


def _first_few(keys: Sequence[Any], quote: bool = False) -> str:
    shown = ", ".join(f'"{k}"' if quote else str(k) for k in keys[:_SHOW])
    return (shown + f", ... (+{len(keys) - _SHOW} more)") if len(keys) > _SHOW else (shown or "none")
