"""WandbLogger against a hand-written wandb loop doing the same logging, measured in one run (offline).

Every step logs N scalars, K histograms (weights of 4,096 values) and one 3x64x64 image. The raw
loop sends them as one dict per step (``run.log``); ours goes through the API a Trainer-based
script uses: ``log_metrics``, ``log_histogram`` per key, ``log_image``, then ``flush()`` where the
Trainer flushes after each logging point. Both log into the same offline run, so they share the
wandb service. Rounds alternate which loop goes first; the median of per-round ratios is reported
(a drift in machine speed affects both sides of a round alike), for wall time and for this
process's CPU time (which other load on a shared machine disturbs less). Rounds are short and
many: a burst of other load spoils a few of them, and the median ignores those. Target: 1.00-1.02.

    python benchmarks/logging_overhead.py [--steps 5] [--rounds 101] [--scalars 8] [--histograms 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from interleave import interleaved

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUIET_WANDB = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_CONSOLE": "off",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_X_DISABLE_STATS": "true",  # no sampling thread competing for the two cores
    "WANDB_X_DISABLE_META": "true",
    "WANDB_X_DISABLE_MACHINE_INFO": "true",
}
STEP = "trainer/global_step"


class Work:
    """The values both loops log: fixed tensors, so each step does the same conversions."""

    def __init__(self, scalars: int, histograms: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.scalars = {f"train/m{i}": float(i) / 7 for i in range(scalars)}
        self.weights = {f"weights/layer{i}": torch.randn(64, 64, generator=g) for i in range(histograms)}
        self.image = torch.rand(3, 64, 64, generator=g)  # CHW float, as a model's input batch holds it


class Clock:
    """Times a loop: returns wall seconds per step, keeps CPU seconds per step (this process, all threads)."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self._wall = self._cpu = 0.0

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self, steps: int) -> float:
        self.cpu.append((time.process_time() - self._cpu) / steps)
        return (time.perf_counter() - self._wall) / steps


def raw_loop(run: Any, work: Work, first_step: int, steps: int, clock: Clock) -> float:
    """What a hand-written script does: one dict per step."""
    import wandb

    clock.start()
    for step in range(first_step, first_step + steps):
        row: dict[str, Any] = dict(work.scalars)
        for key, weight in work.weights.items():
            values: Any = weight.detach().cpu().numpy()  # wandb accepts arrays; its hint says Sequence
            row[key] = wandb.Histogram(values)
        row["samples"] = [wandb.Image(work.image.permute(1, 2, 0).numpy())]
        row[STEP] = step
        run.log(row)
    return clock.stop(steps)


def logger_loop(logger: Any, work: Work, first_step: int, steps: int, clock: Clock) -> float:
    """What a Trainer-based script does: one call per key, the Trainer's flush after the logging point."""
    clock.start()
    for step in range(first_step, first_step + steps):
        logger.log_metrics(work.scalars, step)
        for key, weight in work.weights.items():
            logger.log_histogram(key, weight.detach().cpu(), step)
        logger.log_image("samples", [work.image], step)
        logger.flush()
    return clock.stop(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="logged steps per loop and round")
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--scalars", type=int, default=8)
    parser.add_argument("--histograms", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(QUIET_WANDB)
        for name in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR", "ARTIFACT_DIR"):
            os.environ[f"WANDB_{name}"] = os.path.join(tmp, name.lower())
        import wandb

        from trainer.loggers import WandbLogger

        run = wandb.init(project="logging-overhead", dir=tmp, mode="offline")
        run.define_metric(STEP)
        run.define_metric("*", step_metric=STEP, step_sync=True)
        logger = WandbLogger(project="logging-overhead", save_dir=tmp, offline=True)  # joins the active run
        work = Work(args.scalars, args.histograms)
        steps = iter(range(0, 10**9, args.steps))  # each loop logs steps of its own, all increasing
        warm_up = Clock()
        raw_loop(run, work, next(steps), args.steps, warm_up), logger_loop(logger, work, next(steps), 2, warm_up)
        raw_clock, our_clock = Clock(), Clock()
        raw, ours = interleaved(
            lambda: raw_loop(run, work, next(steps), args.steps, raw_clock),
            lambda: logger_loop(logger, work, next(steps), args.steps, our_clock),
            args.rounds,
        )
        logger.finalize("success")
        wandb.teardown()
    per_step = f"{args.scalars} scalars + {args.histograms} histograms + 1 image per step"
    print(f"{per_step}, {args.steps} steps a loop, {args.rounds} rounds; ms/step are medians")
    for what, base, our in (("wall", raw, ours), ("CPU ", raw_clock.cpu, our_clock.cpu)):
        ratios = [o / b for o, b in zip(our, base)]
        print(
            f"{what}: raw wandb loop {statistics.median(base) * 1e3:6.2f} ms/step,"
            f" WandbLogger {statistics.median(our) * 1e3:6.2f} ms/step,"
            f" ratio {statistics.median(ratios):.3f} (median of per-round ratios;"
            f" min {min(ratios):.3f}, max {max(ratios):.3f}; target 1.00-1.02)"
        )


if __name__ == "__main__":
    main()
