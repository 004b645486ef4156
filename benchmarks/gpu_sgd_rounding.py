"""How far a captured SGD step drifts from the eager one: torch's fused SGD kernel reads a device learning rate as
float32 (``lr.data_ptr<float>()``), where the eager step passes the group's float as a double. This replays the
CUDA kernel's arithmetic (aten/src/ATen/native/cuda/FusedSgdKernel.cu: float32 tensors, double scalars) on the
CPU for the captured-step tests' model (``tests.models.Regressor``, 2 epochs of 12 batches, momentum 0.9,
weight decay 0.01) with the learning rate as a double and as float32, and prints the largest difference of the
parameters. An emulation, not a GPU measurement: it shows the size of the effect, which the GPU test bounds.

    python benchmarks/gpu_sgd_rounding.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.models import Regressor, regression_data


def fused_sgd(params: list[torch.Tensor], buffers: list[np.ndarray], lr: float, first: bool) -> None:
    """One step of sgd_math: ``g += wd * p`` in double, the buffer in double, ``p -= lr * g`` in double."""
    momentum, decay = 0.9, 0.01
    for p, buffer in zip(params, buffers):
        value, grad = p.detach().numpy(), p.grad.detach().numpy()  # type: ignore[union-attr]
        g = (grad.astype(np.float64) + decay * value.astype(np.float64)).astype(np.float32)
        kept = g.astype(np.float64) if first else momentum * buffer.astype(np.float64) + g.astype(np.float64)
        buffer[...] = kept.astype(np.float32)
        g = kept.astype(np.float32)
        value[...] = (value.astype(np.float64) - lr * g.astype(np.float64)).astype(np.float32)


def train(seed: int, lr: float) -> torch.Tensor:
    torch.manual_seed(seed)
    model = Regressor()
    params = list(model.parameters())
    buffers = [np.zeros(tuple(p.shape), np.float32) for p in params]
    x, y = regression_data(96).tensors
    for step, start in enumerate(range(0, 2 * 96, 8)):
        i = start % 96
        loss = torch.nn.functional.mse_loss(model.net(x[i : i + 8]), y[i : i + 8])
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            fused_sgd(params, buffers, lr, first=step == 0)
    return torch.cat([p.detach().flatten() for p in params])


def main() -> None:
    print("lr      seeds  max |captured - eager|  max relative  parameters differing")
    for lr in (2**-4, 0.003, 0.01, 0.05, 0.1):
        worst, relative, differing = 0.0, 0.0, 0
        for seed in range(5):
            eager, captured = train(seed, lr), train(seed, float(np.float32(lr)))
            gap = (captured - eager).abs()
            worst = max(worst, gap.max().item())
            relative = max(relative, (gap / eager.abs().max().clamp_min(1.0)).max().item())
            differing = max(differing, int((gap > 0).sum()))
        print(f"{lr:<7.4g} 5      {worst:<22.3g} {relative:<13.3g} {differing} of {eager.numel()}")


if __name__ == "__main__":
    main()
