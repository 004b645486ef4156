"""``SaveConfigCallback``: the resolved config goes next to the run's logs, so ``fit --config`` repeats it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonargparse import Namespace

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from jsonargparse import ArgumentParser

    from trainer.module import Module
    from trainer.trainer import Trainer


class ConfigExistsError(RuntimeError):
    """The run folder already holds another run's config (a RuntimeError, as Lightning raises)."""


class SaveConfigCallback(Callback):
    """Writes the resolved config to ``<log_dir>/<config_filename>`` when ``fit`` starts (rank zero).

    It refuses to replace a config file that is already there (``ConfigExistsError``): that file
    belongs to another run using the same folder, as happens with the logger off (every run
    writes to ``default_root_dir``) or a fixed logger version. ``overwrite=True`` replaces it.
    A fit that resumes from a checkpoint continues its own run, so it replaces that run's file
    with the resuming command's config, which is also the one its new checkpoints carry.
    Override ``save_config`` to store the config elsewhere too; with ``save_to_log_dir=False``
    it is the only thing done.
    """

    def __init__(
        self,
        parser: ArgumentParser,
        config: Namespace,
        config_filename: str = "config.yaml",
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise MisconfigurationException(
                "`save_to_log_dir=False` only makes sense when subclassing SaveConfigCallback to implement "
                "`save_config`: without it nothing would be saved."
            )
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        self.resuming = False

    def on_load_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """Only a resume calls this hook (validate/test load weights only): the run folder is this run's."""
        self.resuming = True

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """At fit start a resumed run's logger already points back at the run it continues."""
        if self.already_saved:  # a second fit() on the same Trainer is the same run
            return
        if self.save_to_log_dir:
            self._write(trainer)
        if trainer.is_global_zero:
            self.save_config(trainer, module, "fit")
        self.already_saved = True

    def save_config(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Override to store the config somewhere else as well (runs on global rank zero only: no collectives)."""

    def _write(self, trainer: Trainer) -> None:
        path = Path(trainer.run_folder) / self.config_filename if trainer.is_global_zero else None
        clash = path is not None and path.exists() and not (self.overwrite or self.resuming)
        # Every rank learns of the clash, so all of them stop rather than wait for rank zero.
        clashing_path = trainer.strategy.broadcast(str(path) if clash else None)
        if clashing_path is not None:
            raise ConfigExistsError(_refusal(clashing_path))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, path, skip_unset=False, overwrite=True, multifile=self.multifile)


def _refusal(path: str) -> str:
    folder = Path(path).parent
    return (
        f"SaveConfigCallback expected {path} to NOT exist. Aborting to avoid overwriting results of a previous run "
        f"in {folder}. Use a fresh --trainer.default_root_dir, "
        'keep the logger on (a new version_N folder per run), or pass save_config_kwargs={"overwrite": True} '
        "(or save_config_callback=None) to CLI."
    )
