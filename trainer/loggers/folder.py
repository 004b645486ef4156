"""The run folder of the file loggers (CSV, TensorBoard): ``<save_dir>/<name>/version_<n>``, Lightning's layout."""

from __future__ import annotations

import os

from typing_extensions import override

from trainer.loggers.base import Logger


def next_version(root: str) -> int:
    """The first ``n`` above every existing ``version_<n>`` folder, so runs never overwrite each other."""
    if not os.path.isdir(root):
        return 0
    taken = [int(d.name[8:]) for d in os.scandir(root) if d.name.startswith("version_") and d.name[8:].isdigit()]
    return max(taken, default=-1) + 1


class RunFolder:
    """``<save_dir>/<name>/version_<n>`` (or ``<name>/<version>`` for a string version).

    The version is picked on first use, not at construction, so building a logger touches no disk.
    Nothing is created here: the loggers create the folder on their first write.
    """

    def __init__(self, save_dir: str, name: str, version: int | str | None = None) -> None:
        self.save_dir = save_dir
        self.name = name
        self._version = version

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(os.path.join(self.save_dir, self.name))
        return self._version

    @version.setter
    def version(self, version: int | str) -> None:
        self._version = version

    @property
    def path(self) -> str:
        version = self.version
        folder = version if isinstance(version, str) else f"version_{version}"
        return os.path.join(self.save_dir, self.name, folder)


class FolderLogger(Logger):
    """A logger that writes into a :class:`RunFolder`: Lightning's ``log_dir``, ``save_dir``, ``root_dir`` and
    ``version``, each a view of the folder (subclasses set ``name`` and ``_folder``)."""

    name: str
    _folder: RunFolder

    @property
    @override
    def log_dir(self) -> str:
        return self._folder.path

    @property
    def save_dir(self) -> str:
        """The folder the run folders go under, a str as Lightning's."""
        return os.fspath(self._folder.save_dir)

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the run folders of this name, as Lightning's."""
        return os.path.join(self.save_dir, self.name)

    @property
    def version(self) -> int | str:
        return self._folder.version
