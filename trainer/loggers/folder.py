"""The run folder of the file loggers (CSV, TensorBoard, MLflow's checkpoints): ``<save_dir>/<name>/version_<n>``,
Lightning's layout.

A version is claimed, not guessed: global rank zero creates ``version_<n>`` with ``os.mkdir``, which fails
when the folder exists, and takes the next number then. Runs started together in one folder (a sweep, a
job array) therefore each get their own folder, however their starts interleave. Other ranks never
claim: they take rank zero's version (``share_run_folders``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

from typing_extensions import override

from trainer.claims import claim_version, next_version, refuse_url
from trainer.loggers.base import Logger


def global_rank() -> int:
    """This process's global rank: the process group's once there is one, else the launcher's environment."""
    import torch.distributed as dist

    from trainer.launch import rank_from_environment  # here: `import trainer` stays light

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return rank_from_environment()


class RunFolder:
    """``<save_dir>/<name>/version_<n>`` (or ``<name>/<version>`` for a string version).

    The version is picked on first use, not at construction, so building a logger touches no disk. On
    global rank zero, picking it creates the folder (``claim_version``); a version given by the user is
    used as it is (reusing a folder is then the user's choice, as in Lightning). A version set later (a
    resumed run continues its checkpoint's folder) gives back a folder this run claimed and left empty.
    """

    def __init__(self, save_dir: str, name: str, version: int | str | None = None) -> None:
        refuse_url(save_dir, "the logger's save_dir (default_root_dir for the default logger)")
        self.save_dir = save_dir
        self.name = name
        self.root = expand(os.path.join(save_dir, name))  # ``~`` and ``$VAR`` expanded, as Lightning's log_dir
        self.given = version is not None  # the user chose the folder
        self._version = version
        self._claimed: str | None = None  # the folder this process created, while it may still be given back

    @property
    def picked(self) -> bool:
        """Whether the version is known yet (reading ``version`` or ``path`` picks, and claims, it)."""
        return self._version is not None

    @property
    def version(self) -> int | str:
        if self._version is None:
            if global_rank() == 0:
                self._version = claim_version(self.root)
                self._claimed = self.path
            else:  # rank zero's choice arrives with share_run_folders; until then, a guess
                return next_version(self.root)
        return self._version

    @version.setter
    def version(self, version: int | str) -> None:
        if version != self._version:
            self.give_back()
        self._version = version

    def give_back(self) -> None:
        """Remove the folder this run claimed, if nothing was written to it (``rmdir`` fails otherwise)."""
        claimed, self._claimed = self._claimed, None
        if claimed is not None:
            with contextlib.suppress(OSError):
                os.rmdir(claimed)

    @property
    def path(self) -> str:
        return os.path.join(self.root, version_folder(self.version))


def version_folder(version: int | str) -> str:
    """A string version is the folder's name; a number ``n`` is ``version_<n>`` (Lightning's rule)."""
    return version if isinstance(version, str) else f"version_{version}"


def expand(path: str) -> str:
    """``~`` and ``$VAR`` in a folder given to a logger, expanded (Lightning's TensorBoard ``log_dir`` does)."""
    return os.path.expanduser(os.path.expandvars(path))


def share_run_folders(loggers: Sequence[Logger], strategy: Any) -> None:
    """Collective with several processes: rank zero claims each logger's run folder, the others take its version.

    Then ``trainer.log_dir`` (the profiler's reports, a callback's files) is the same folder on every rank.
    """
    if strategy.world_size == 1:
        return
    folders = [f for f in (getattr(lg, "_folder", None) for lg in loggers) if isinstance(f, RunFolder)]
    chosen: list[int | str] | OSError | None = None
    if strategy.is_global_zero:
        try:
            chosen = [folder.version for folder in folders]
        except OSError as err:  # every rank raises it: none waits for a folder that never comes
            chosen = err
    chosen = strategy.broadcast(chosen)
    if isinstance(chosen, OSError):
        raise chosen
    if not strategy.is_global_zero:
        for folder, version in zip(folders, chosen or [], strict=True):
            folder.version = version


class FolderLogger(Logger):
    """A logger that writes into a :class:`RunFolder`: Lightning's ``name``, ``log_dir``, ``save_dir``,
    ``root_dir`` and ``version``, each a view of the folder (subclasses set ``_name`` and ``_folder``).

    ``log_dir`` is made of the ``root_dir``, ``version`` and ``sub_dir`` properties, so a subclass that
    overrides one (Lightning's way to fix a run's folder) moves it."""

    _name: str
    _folder: RunFolder

    @property
    @override
    def name(self) -> str:
        return self._name

    @property
    @override
    def log_dir(self) -> str:
        path = os.path.join(self.root_dir, version_folder(self.version))
        sub_dir = self.sub_dir
        return expand(os.path.join(path, sub_dir) if sub_dir else path)

    @property
    def sub_dir(self) -> str | None:
        """A folder inside the run's (TensorBoard's ``sub_dir``); None for the run's folder itself."""
        return None

    @property
    @override
    def save_dir(self) -> str:
        """The folder the run folders go under, a str as Lightning's."""
        return os.fspath(self._folder.save_dir)

    @property
    @override
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the run folders of this name, as Lightning's."""
        return os.path.join(self.save_dir, self.name)

    @property
    @override
    def version(self) -> int | str:
        return self._folder.version
