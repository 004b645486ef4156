"""Per-step overhead of the Trainer against a hand-written PyTorch loop, measured in one run.

Tiny MLP 32->64->1, batch 32, 3,000 steps, one thread, no logging/checkpointing/progress bar.
Both loops read the same DataLoader and run the same math; runs are interleaved (alternating
which goes first) and the median of the per-round ratios is reported, with the ratio of the
best runs beside it (the least disturbed by other load). Target: ratio <= 1.02.

    python benchmarks/overhead.py [--steps 3000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from interleave import interleaved, round_ratios
from torch.utils.data import DataLoader, TensorDataset

import trainer


def make_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


class MLP(trainer.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(steps: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(steps * 32, 32, generator=g), torch.randn(steps * 32, 1, generator=g))
    return DataLoader(data, batch_size=32)


def raw_loop(steps: int) -> float:
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    data = loader(steps)
    start = time.perf_counter()
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def trainer_loop(steps: int) -> float:
    module = MLP()
    fit = trainer.Trainer(
        accelerator="cpu",
        max_steps=steps,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,  # a one-time print, off like the bar and the logger
        num_sanity_val_steps=0,
    )
    data = loader(steps)
    start = time.perf_counter()
    fit.fit(module, data)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    raw_loop(200), trainer_loop(200)  # warm-up: allocator, lazy imports
    raw, ours = interleaved(lambda: raw_loop(args.steps), lambda: trainer_loop(args.steps), args.repeats)
    raw_s, ours_s = statistics.median(raw), statistics.median(ours)
    print(f"raw PyTorch loop : {raw_s * 1e6:8.1f} us/step (median of {args.repeats}; best {min(raw) * 1e6:.1f})")
    print(f"steadytrain      : {ours_s * 1e6:8.1f} us/step (median of {args.repeats}; best {min(ours) * 1e6:.1f})")
    median, low, high = round_ratios(raw, ours)
    print(
        f"ratio            : {median:.3f} (median of per-round ratios; min {low:.3f}, max {high:.3f}),"
        f" {min(ours) / min(raw):.3f} of bests  (target <= 1.02; Lightning 2.6: 2.07, Accelerate: 1.65)"
    )


if __name__ == "__main__":
    main()
