"""What a logger must do. The Trainer calls loggers on global rank zero only."""

from __future__ import annotations

import atexit
import os
import warnings
from argparse import Namespace
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np  # already loaded by torch


class Logger:
    """A sink for hyper-parameters and scalar metrics; everything beyond that is optional.

    Lightning's ``Logger`` API: a logger written for Lightning (``log_metrics``, ``log_hyperparams``,
    ``save``, ``finalize``, ``name``, ``version``) runs here unchanged. A logger may buffer what it is given
    (the built-in ones keep a step's values to write them in one call); ``flush`` (Lightning's ``save``)
    hands the buffer to the backend, and ``finalize`` flushes before closing.
    """

    LOGGER_JOIN_CHAR = "-"  # Lightning's: a ``prefix`` is joined to each metric's name with it

    @property
    def name(self) -> str | None:
        """The experiment's name (a subclass may set a plain attribute instead)."""
        return "logger"

    @property
    def version(self) -> int | str | None:
        """The run's version, None when the logger has none (Lightning's)."""
        return None

    @property
    def log_dir(self) -> str | None:
        """Folder this run writes to (checkpoints default to ``<log_dir>/checkpoints``)."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The folder the logger writes under; None for a logger that writes nothing locally (Lightning's)."""
        return None

    @property
    def root_dir(self) -> str | None:
        """``<save_dir>/<name>`` for the file loggers; None for the others (Lightning's)."""
        return None

    @property
    def group_separator(self) -> str:
        """What joins a group's name to a metric's (Lightning's)."""
        return "/"

    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        """Record the run's configuration once, at fit start."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record scalars at a global step (None: the logger's own next step, as in Lightning)."""
        raise NotImplementedError

    def start_early(self) -> None:
        """Called at each stage's start on global rank zero, for every logger before any writes: a backend that must
        start before the others' does so here (wandb's ``sync_tensorboard``). Optional."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's graph; called at fit start, as in Lightning. Optional (TensorBoard's ``log_graph``)."""

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Record images (HWC uint8 arrays, CHW tensors or PIL images); optional."""

    def log_histogram(self, key: str, values: Any, step: int) -> None:
        """Record the distribution of a tensor's values (weights, gradients); optional."""

    def flush(self) -> None:
        """Hand everything buffered to the backend; under a microsecond when nothing is buffered.

        wandb and TensorBoard keep what is logged at one step and send it as one write (one
        ``wandb.log`` call, one event) when another step is logged; CSV keeps up to
        ``flush_logs_every_n_steps`` rows. Checkpoints (``state_dict``), ``finalize`` and a normal exit
        write the buffer too, so nothing is lost without ``flush``: values only reach the backend later.
        The Trainer calls ``save`` (which calls ``flush``) on global rank zero each time a logging point is
        complete: at the end of every optimizer step (after the step's metrics are written and the
        ``on_train_batch_end`` hooks ran), after a validation or test epoch's metrics, and after the
        training epoch's metrics; ``finalize`` flushes by itself. Never between two writes of one logging
        point: that splits its row in two.
        """

    def save(self) -> None:
        """Lightning's name for ``flush``, and what the Trainer calls: a logger written for Lightning overrides
        this one, a steadytrain logger ``flush``."""
        self.flush()

    def finalize(self, status: str) -> None:
        """Flush and close; ``status`` is "success", "failed" or "interrupted"."""
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """A ``ModelCheckpoint`` (typed ``Any``: callbacks import loggers) wrote a checkpoint, on global rank
        zero, file in place; for loggers that upload checkpoints."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue the same run (ids, versions)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def add_prefix(metrics: Mapping[str, Any], prefix: str, separator: str) -> dict[str, Any]:
    """``{"loss": 1}`` as ``{"<prefix><separator>loss": 1}``; unchanged (a copy) without a prefix."""
    if not prefix:
        return dict(metrics)
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


def hparams_dict(params: Any) -> dict[str, Any]:
    """What ``log_hyperparams`` takes, as a dict: a dict, an ``argparse.Namespace``, a mapping (OmegaConf's
    ``DictConfig`` too), or None (nothing)."""
    if params is None:
        return {}
    if isinstance(params, Namespace):
        return dict(vars(params))
    if type(params).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(params, resolve=True))  # type: ignore[arg-type]
    if hasattr(params, "items"):
        return dict(params.items())
    raise TypeError(f"log_hyperparams takes a dict or an argparse.Namespace; got {type(params).__name__}.")


class StepBuffer:
    """The values logged at one step, written together by ``write(step, values)``.

    A value logged again at the same step replaces the earlier one, as it would in one dict.
    """

    def __init__(self, write: Callable[[int, dict[str, Any]], None]) -> None:
        self._write = write
        self.step: int | None = None
        self.values: dict[str, Any] = {}

    def add(self, step: int, values: dict[str, Any]) -> None:
        """Keep ``values``; a step other than the buffered one (later or, after a resume, earlier) flushes first."""
        if step != self.step:
            self.flush()
            self.step = step
        self.values.update(values)

    def flush(self) -> None:
        """Write the buffered step; emptied first, so a value the backend rejects is not retried forever."""
        step, values = self.step, self.values
        self.step, self.values = None, {}
        if step is not None and values:
            self._write(step, values)


class FlushAtExit:
    """A logger's flush when this process exits normally, so a run that never reaches ``finalize`` loses
    nothing: registered once (with the first value logged), unregistered at ``finalize``.

    A forked child inherits the hook but skips it: it would write its parent's buffered rows a second time.
    """

    def __init__(self) -> None:
        self._hook: Callable[[], None] | None = None

    def register(self, flush: Callable[[], None]) -> None:
        """Run ``flush`` at exit; a second call keeps the first hook."""
        if self._hook is not None:
            return
        pid = os.getpid()

        def hook() -> None:
            if os.getpid() != pid:
                return
            try:
                flush()
            except Exception as exc:  # e.g. wandb torn down before exit: say what was lost in one line
                warnings.warn(f"logged values still buffered at exit were not written: {exc!r}", stacklevel=1)

        atexit.register(hook)
        self._hook = hook

    def unregister(self) -> None:
        if self._hook is not None:
            atexit.unregister(self._hook)
            self._hook = None


def sanitize_hparams(value: Any) -> Any:
    """Keep primitives, dicts and lists; anything else becomes ``str`` so YAML and wandb accept it.

    Subclasses of primitives (numpy floats, str enums) are converted too: ``yaml.safe_dump`` rejects them.
    """
    if value is None:
        return None
    if isinstance(value, np.generic):  # numpy scalars (np.bool_ is no bool): their Python value
        value = value.item()
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, dict):
        return {str(k): sanitize_hparams(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize_hparams(v) for v in value]
    return str(value)


def to_numpy(values: Any) -> Any:
    """A tensor (any device or dtype, bf16 included), array or sequence as a numpy array.

    A CPU tensor that needs no grad is shared, not converted: histograms are logged for every
    parameter, mostly already detached on the CPU, so each call's overhead counts.
    """
    if hasattr(values, "detach"):
        if values.requires_grad:
            values = values.detach()
        if not values.is_cpu:
            values = values.cpu()
        dtype = values.dtype
        if dtype.is_floating_point and dtype.itemsize < 4:  # bfloat16 has no numpy dtype
            values = values.float()
        return values.numpy()
    return np.asarray(values)


def to_image_array(image: Any) -> Any:
    """An image as an HWC (or HW) numpy array: CHW tensors are transposed, single channels dropped."""
    is_tensor = hasattr(image, "detach")
    array = to_numpy(image)
    if is_tensor and array.ndim == 3 and array.shape[0] in (1, 3, 4):
        array = array.transpose(1, 2, 0)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    return array


def finite_values(values: Any) -> Any:
    """The finite entries, flattened: NaN or inf (a diverging run) would make histogram binning fail.

    Copied only when something is dropped: weights are usually all finite, and histograms are logged
    for every parameter.
    """
    array = to_numpy(values).reshape(-1)
    finite = np.isfinite(array)
    return array if finite.all() else array[finite]


def disk_error(path: str, err: OSError) -> str:
    """What a failed log write says: the file, the reason and the free space where it lives."""
    import shutil

    folder = os.path.dirname(path) or "."
    try:
        free = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    return (
        f"could not write the log {path}: {err.strerror or err} ({free}). Free space, or point the logger "
        "(save_dir, default_root_dir) to a filesystem with room."
    )
