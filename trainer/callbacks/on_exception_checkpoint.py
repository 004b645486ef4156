"""``OnExceptionCheckpoint``: a checkpoint written when a stage fails, to look at or resume from (Lightning's)."""

from __future__ import annotations

import os
from typing import Any

from trainer.callbacks.base import Checkpoint


class OnExceptionCheckpoint(Checkpoint):
    """Save ``<dirpath>/<filename>.ckpt`` when fit/validate/test/predict raises (the save is atomic; an earlier
    one is replaced). A stage that ends without an error removes it, as Lightning does, so the file is there only
    after a failure. Under several processes a failure on one rank ends the job before it can save; use
    ``ModelCheckpoint`` for regular saves.
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        if not filename:
            raise ValueError("OnExceptionCheckpoint(filename=''): the filename cannot be empty.")
        self.dirpath = os.fspath(dirpath)  # given now: an exception can come before any setup
        self.filename = filename
        self._failed = False

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._failed = False

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._failed = True
        trainer.save_checkpoint(self.ckpt_path)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if not self._failed and trainer.is_global_zero:
            from trainer.checkpoint.sharded import remove_checkpoint

            if os.path.exists(self.ckpt_path):
                remove_checkpoint(self.ckpt_path)
