"""What ``cuda_graph=True`` refuses, each with a clear error: at ``Trainer(...)`` what the flags decide, at
fit set-up what the module and its optimizer decide. Anything else that cannot be captured is found
while the run warms up and falls back to the eager step with a warning (``trainer.graphs.captured``)."""

from __future__ import annotations

from typing import Any

import trainer.graphs.backend as backend
from trainer.module import Module
from trainer.overrides import overrides
from trainer.strategies.single import SingleDeviceStrategy

DDP_NOTE = "docs/cuda-graphs.md says what capturing a DDP step would need"


def check_trainer(trainer: Any) -> None:
    """At ``Trainer(...)``: the flag's type, one CUDA device, and flags whose step reads values on the host."""
    flag = trainer.cuda_graph
    if not isinstance(flag, bool):
        raise TypeError(f"cuda_graph={flag!r} must be True or False.")
    if not flag:
        return
    strategy = trainer.strategy
    if not isinstance(strategy, SingleDeviceStrategy):
        raise ValueError(
            f"cuda_graph=True captures the step on one device, but strategy={strategy.name!r} runs "
            f"{trainer.world_size} process(es) on {len(strategy.device_indices)} device(s). Use devices=1 "
            f"(strategy='auto' or 'single'), or leave cuda_graph=False; {DDP_NOTE}."
        )
    backend.check_device(strategy.root_device)
    if getattr(trainer.precision_plugin, "scaler", None) is not None:
        raise ValueError(
            f"cuda_graph=True with precision={trainer.precision!r}: the GradScaler decides on the host whether "
            "to skip each step, which a captured step cannot do. Use precision='bf16-mixed' (no scaler; the same "
            "speed on GPUs with bfloat16) or '32-true', or leave cuda_graph=False."
        )
    if trainer.on_nonfinite_loss == "skip":
        raise ValueError(
            "cuda_graph=True with on_nonfinite_loss='skip': skipping a batch means reading its loss on the host every "
            "step. Use on_nonfinite_loss='raise' (checked on the device, the default) or 'off'."
        )
    if trainer.detect_anomaly:
        raise ValueError(
            "cuda_graph=True with detect_anomaly=True: anomaly detection reads every gradient on the host. Debug with "
            "cuda_graph=False."
        )


def check_fit(module: Module) -> None:
    """At fit set-up: the automatic step of one optimizer, with Lightning's step (no closure)."""
    name = type(module).__name__
    if not module.automatic_optimization:
        raise ValueError(
            f"cuda_graph=True captures the automatic step, but {name} sets automatic_optimization=False. Capture "
            "your own step with torch.cuda.graph, or leave cuda_graph=False."
        )
    if overrides(module, "optimizer_step", Module):
        raise ValueError(
            f"cuda_graph=True captures the automatic step, but {name} overrides optimizer_step (a closure step, run "
            "in your Python each time). Move what it does to on_before_optimizer_step or an LR scheduler, or leave "
            "cuda_graph=False."
        )
