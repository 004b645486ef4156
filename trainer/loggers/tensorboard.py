"""TensorBoard event files; ``torch.utils.tensorboard`` is imported on first write (it is slow to import)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import override

from trainer.loggers.base import Logger, finite_values, sanitize_hparams, to_image_array
from trainer.loggers.csv import RunFolder

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


def _summary_writer(log_dir: str, purge_step: int | None) -> SummaryWriter:
    from lightning_utilities.core.imports import RequirementCache

    if not RequirementCache("tensorboard"):
        raise ImportError("TensorBoardLogger needs tensorboard: pip install steadytrain[tensorboard]")
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=log_dir, purge_step=purge_step)


class TensorBoardLogger(Logger):
    """Writes event files to ``<save_dir>/<name>/version_<n>``, the CSV logger's layout.

    A resumed run reopens the same folder with ``purge_step``, so TensorBoard hides what the crashed
    run logged after its last checkpoint instead of drawing those steps twice.
    """

    def __init__(self, save_dir: str = "runs", name: str = "default", version: int | str | None = None) -> None:
        self.name = name
        self._folder = RunFolder(save_dir, name, version)
        self._writer: SummaryWriter | None = None
        self._hparams: dict[str, Any] | None = None
        self._last_step: int | None = None
        self._purge_step: int | None = None

    @property
    @override
    def log_dir(self) -> str:
        return self._folder.path

    @property
    def version(self) -> int | str:
        return self._folder.version

    @property
    def experiment(self) -> SummaryWriter:
        """The ``SummaryWriter``, opened on first use."""
        if self._writer is None:
            self._writer = _summary_writer(self.log_dir, self._purge_step)
        return self._writer

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Kept until the first metrics, so a ``load_state_dict`` that comes later still picks the folder."""
        self._hparams = sanitize_hparams(dict(params))

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._write_hparams()
        for key, value in metrics.items():
            self.experiment.add_scalar(key, float(value), step)
        self._last_step = step

    @override
    def log_image(self, key: str, images: list[Any], step: int, **kwargs: Any) -> None:
        for i, image in enumerate(images):
            array = to_image_array(image)
            tag = key if len(images) == 1 else f"{key}/{i}"
            self.experiment.add_image(tag, array, step, dataformats="HW" if array.ndim == 2 else "HWC")

    @override
    def log_histogram(self, key: str, values: Any, step: int) -> None:
        values = finite_values(values)
        if values.size:
            self.experiment.add_histogram(key, values, step)

    @override
    def finalize(self, status: str) -> None:
        self._write_hparams()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    @override
    def state_dict(self) -> dict[str, Any]:
        if self._writer is not None:
            self._writer.flush()
        return {"version": self.version, "step": self._last_step}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue in the checkpointed run's folder; call it before logging anything."""
        self._folder.version = state["version"]
        step = state.get("step")
        self._purge_step = None if step is None else step + 1

    def _write_hparams(self) -> None:
        """As YAML in a text panel: ``add_hparams`` would open a second run folder per call."""
        if self._hparams is None:
            return
        import yaml

        text = yaml.safe_dump(self._hparams, sort_keys=False)
        self.experiment.add_text("hparams", "".join(f"    {line}\n" for line in text.splitlines()), 0)
        self._hparams = None
