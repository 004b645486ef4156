"""A whole first fit in a fresh process against the same raw loop: the per-step cost plus every fixed
cost a short run pays once (``import trainer``, building the Trainer, set-up, teardown).

Each measurement is a new interpreter that imports torch, then times from just before the
job's own imports (``import trainer`` for ours) to the end of training: the tiny MLP of
``overhead.py``, 3,000 steps, one thread, no logger, checkpoints, progress bar or summary. The
package is byte-compiled first, as an installed one is (torch loads bytecode too). Rounds rotate
which job runs first; the median of per-round ratios is reported. Target: ratio <= 1.02.

    python benchmarks/first_fit.py [--steps 3000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from interleave import byte_compile_trainer, interleaved, round_ratios


def _data(steps: int) -> object:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(steps * 32, 32, generator=g), torch.randn(steps * 32, 1, generator=g))
    return DataLoader(data, batch_size=32)


def _net() -> object:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def raw_job(steps: int) -> float:
    import torch

    start = time.perf_counter()
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)  # type: ignore[attr-defined]
    for x, y in _data(steps):  # type: ignore[attr-defined]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), y)  # type: ignore[operator]
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def trainer_job(steps: int) -> float:
    import torch

    start = time.perf_counter()
    import trainer

    class MLP(trainer.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net()

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)  # type: ignore[operator]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    fit = trainer.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    fit.fit(MLP(), _data(steps))
    return time.perf_counter() - start


def fresh(job: str, steps: int) -> float:
    """Seconds ``job`` took in a new interpreter (torch already imported, one thread)."""
    code = (
        f"import sys; sys.path.insert(0, {sys.path[0]!r}); import torch; torch.set_num_threads(1); "
        f"import first_fit; print(first_fit.{job}({steps}))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    byte_compile_trainer()
    raw, ours = interleaved(
        lambda: fresh("raw_job", args.steps), lambda: fresh("trainer_job", args.steps), args.repeats
    )
    median, low, high = round_ratios(raw, ours)
    print(f"raw loop, fresh process    : {statistics.median(raw):.3f} s (median of {args.repeats})")
    print(f"steadytrain first fit      : {statistics.median(ours):.3f} s (import trainer included)")
    print(f"ratio                      : {median:.3f} (median of per-round ratios; min {low:.3f}, max {high:.3f});")
    fixed = statistics.median(o - r for o, r in zip(ours, raw))
    print(f"fixed cost                 : {fixed * 1e3:+.0f} ms (median per round); target ratio <= 1.02")


if __name__ == "__main__":
    main()
