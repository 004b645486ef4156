"""What a logger must do. The Trainer calls loggers on global rank zero only."""

from __future__ import annotations

from typing import Any


class Logger:
    """A sink for hyper-parameters and scalar metrics; everything beyond that is optional."""

    name: str = "logger"

    @property
    def log_dir(self) -> str | None:
        """Folder this run writes to (checkpoints default to ``<log_dir>/checkpoints``)."""
        return None

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Record the run's configuration once, at fit start."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record scalars at a global step."""
        raise NotImplementedError

    def log_image(self, key: str, images: list[Any], step: int, **kwargs: Any) -> None:
        """Record images (HWC uint8 arrays, CHW tensors or PIL images); optional."""

    def log_histogram(self, key: str, values: Any, step: int) -> None:
        """Record the distribution of a tensor's values (weights, gradients); optional."""

    def flush(self) -> None:
        """Send what was logged so far; the Trainer calls it after each of its logging points."""

    def finalize(self, status: str) -> None:
        """Flush and close; ``status`` is "success", "failed" or "interrupted"."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue the same run (ids, versions)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def sanitize_hparams(value: Any) -> Any:
    """Keep primitives, dicts and lists; anything else becomes ``str`` so YAML and wandb accept it.

    Subclasses of primitives (numpy floats, str enums) are converted too: ``yaml.safe_dump`` rejects them.
    """
    if value is None:
        return None
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, dict):
        return {str(k): sanitize_hparams(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize_hparams(v) for v in value]
    return str(value)


def to_numpy(values: Any) -> Any:
    """A tensor (any device or dtype, bf16 included), array or sequence as a numpy array."""
    import numpy as np

    if hasattr(values, "detach"):
        values = values.detach().cpu()
        values = values.float() if values.is_floating_point() else values
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
    """The finite entries, flattened: NaN or inf (a diverging run) would make histogram binning fail."""
    import numpy as np

    array = to_numpy(values).reshape(-1)
    return array[np.isfinite(array)]
