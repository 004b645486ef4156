"""A trained ``Module`` as TorchScript, ONNX or TensorRT (Lightning's ``to_torchscript``, ``to_onnx``,
``to_tensorrt``): each exports the module in eval mode, puts its mode back after, and moves the example input
through the module's batch-transfer hooks as a batch would be."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import warnings
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module

_DEPRECATED = (
    "`LightningModule.to_torchscript` has been deprecated in v2.7 and will be removed in v2.8 (steadytrain follows "
    "Lightning's schedule). TorchScript is deprecated in PyTorch. Use `torch.export.export()` for model exporting "
    "instead. See https://pytorch.org/docs/stable/export.html for more information."
)


def as_batch(module: Module, sample: Any) -> Any:
    """``sample`` as the module's batch hooks make a batch: ``on_before_batch_transfer``, the move to the module's
    device, ``on_after_batch_transfer``."""
    sample = module.on_before_batch_transfer(sample, 0)
    sample = module.transfer_batch_to_device(sample, module.device, 0)
    return module.on_after_batch_transfer(sample, 0)


@contextlib.contextmanager
def _scripting(module: Module) -> Iterator[None]:
    """TorchScript reads every attribute; ``trainer`` reads None meanwhile instead of raising."""
    owner = next(cls for cls in type(module).__mro__ if "_scripting" in vars(cls))  # Module, which reads it
    setattr(owner, "_scripting", True)  # noqa: B010
    try:
        yield
    finally:
        setattr(owner, "_scripting", False)  # noqa: B010


@contextlib.contextmanager
def _in_eval(module: Module) -> Iterator[None]:
    mode = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(mode)


def _example(module: Module, given: Any, what: str) -> Any:
    if given is not None:
        return given
    if module.example_input_array is None:
        raise ValueError(what)
    return module.example_input_array


def _save_script(script: Any, file_path: str | Path) -> None:
    """``torch.jit.save``; a URL (``s3://...``) through fsspec, where it is installed."""
    path = str(file_path)
    if "://" in path and importlib.util.find_spec("fsspec") is not None:
        import fsspec

        with fsspec.open(path, "wb") as f:
            torch.jit.save(script, f)
        return
    torch.jit.save(script, path)


@torch.no_grad()
def to_torchscript(
    module: Module, file_path: str | Path | None, method: str | None, example_inputs: Any, **kwargs: Any
) -> Any:
    """The module compiled by ``torch.jit.script`` (default) or traced by ``torch.jit.trace``, saved to
    ``file_path`` if given."""
    from lightning_utilities.core.rank_zero import rank_zero_only

    from trainer.user_warnings import LightningDeprecationWarning

    if getattr(rank_zero_only, "rank", 0) == 0:  # the category a ported `pytest.warns` names
        warnings.warn(_DEPRECATED, LightningDeprecationWarning, stacklevel=3)
    if method not in ("script", "trace"):
        raise ValueError(f"The 'method' parameter only supports 'script' or 'trace', but value given was: {method}")
    with _in_eval(module), _scripting(module):
        if method == "script":
            script = torch.jit.script(module, **kwargs)
        else:
            example_inputs = _example(
                module,
                example_inputs,
                "Choosing method=`trace` requires either `example_inputs` or `model.example_input_array` to be "
                "defined.",
            )
            if kwargs.get("check_inputs") is not None:
                kwargs["check_inputs"] = as_batch(module, kwargs["check_inputs"])
            script = torch.jit.trace(func=module, example_inputs=as_batch(module, example_inputs), **kwargs)
    if file_path is not None:
        _save_script(script, file_path)
    return script


@torch.no_grad()
def to_onnx(module: Module, file_path: str | Path | BytesIO | None, input_sample: Any, **kwargs: Any) -> Any:
    """``torch.onnx.export`` of the module on ``input_sample`` (default: ``example_input_array``)."""
    if importlib.util.find_spec("onnx") is None:
        raise ModuleNotFoundError(f"`{type(module).__name__}.to_onnx()` requires `onnx` to be installed.")
    if kwargs.get("dynamo", False) and importlib.util.find_spec("onnxscript") is None:
        raise ModuleNotFoundError(
            f"`{type(module).__name__}.to_onnx(dynamo=True)` requires `onnxscript` and `torch>=2.5.0` to be installed."
        )
    sample = _example(
        module,
        input_sample,
        "Could not export to ONNX since neither `input_sample` nor `model.example_input_array` attribute is set.",
    )
    path = str(file_path) if isinstance(file_path, Path) else file_path
    with _in_eval(module):
        return torch.onnx.export(module, as_batch(module, sample), path, **kwargs)  # type: ignore[arg-type]


@torch.no_grad()
def to_tensorrt(
    module: Module,
    file_path: str | Path | BytesIO | None,
    input_sample: Any,
    ir: str,
    output_format: str,
    retrace: bool,
    default_device: str | torch.device,
    **compile_kwargs: Any,
) -> Any:
    """``torch_tensorrt.compile`` of the module (on a CUDA device), saved to ``file_path`` if given."""
    if importlib.util.find_spec("torch_tensorrt") is None:
        raise ModuleNotFoundError(f"`{type(module).__name__}.to_tensorrt` requires `torch_tensorrt` to be installed. ")
    device = module.device
    if device.type != "cuda":
        target = torch.device(default_device)
        if not torch.cuda.is_available() or target.type != "cuda":
            raise MisconfigurationException(
                f"TensorRT only supports CUDA devices. The current device is {device}. Please set the "
                "`default_device` argument to a CUDA device."
            )
        module.to(target)
    sample = _example(
        module,
        input_sample,
        "Could not export to TensorRT since neither `input_sample` nor `model.example_input_array` attribute is set.",
    )
    import torch_tensorrt

    sample = as_batch(module, copy.deepcopy((sample,) if isinstance(sample, torch.Tensor) else sample))
    try:
        with _in_eval(module), _scripting(module) if ir == "ts" else contextlib.nullcontext():
            compiled = torch_tensorrt.compile(module=module, ir=ir, inputs=sample, **compile_kwargs)
    finally:
        module.to(device)
    if file_path is not None:
        if ir == "ts":
            if output_format != "torchscript":
                raise ValueError(
                    "TensorRT with IR mode 'ts' only supports output format 'torchscript'. The current output format "
                    f"is {output_format}."
                )
            torch.jit.save(compiled, file_path)
        else:
            torch_tensorrt.save(compiled, file_path, inputs=sample, output_format=output_format, retrace=retrace)
    return compiled
