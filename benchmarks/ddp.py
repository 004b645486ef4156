"""Our DDP against a hand-written torchrun DDP script, in one run.

gloo, 2 ranks, MLP 64->W->W->1 for W in (64, 512), batch 32 per rank, 1,500 steps, one thread
per rank. Three jobs per round: the raw script under torchrun, ours under torchrun, and ours
self-launched (``python script.py`` with ``devices=2``). Each round rotates which runs first; the
median of per-round ratios is reported, and self-launched against under-torchrun (what starting
the ranks ourselves costs). Target: ratio <= 1.03 (Lightning 2.6 measured 1.67x at
W=64 and 1.52x at W=512 on this machine).

    python benchmarks/ddp.py [--steps 1500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

from interleave import round_ratios

WORKER = Path(__file__).with_name("ddp_worker.py")


def one_run(mode: str, width: int, steps: int) -> float:
    launcher = [] if mode == "self" else ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd = [
        sys.executable,
        *launcher,
        str(WORKER),
        "--mode",
        mode,
        "--width",
        str(width),
        "--steps",
        str(steps),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    match = re.search(r"per_step_us=([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 512])
    args = parser.parse_args()
    modes = ["raw", "trainer", "self"]
    for width in args.widths:
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for i in range(args.repeats):
            for mode in modes[i % 3 :] + modes[: i % 3]:  # rotated: no job always gets the same slot
                times[mode].append(one_run(mode, width, args.steps))
        raw = times["raw"]
        print(f"W={width:4d}  raw DDP (torchrun) {statistics.median(raw):8.1f} us/step")
        for mode, label in (("trainer", "steadytrain, torchrun     "), ("self", "steadytrain, self-launched")):
            median, low, high = round_ratios(raw, times[mode])
            print(
                f"        {label} {statistics.median(times[mode]):8.1f} us/step  ratio {median:.3f}"
                f" (median of {args.repeats} per-round ratios; min {low:.3f}, max {high:.3f}; target <= 1.03)"
            )
        median, low, high = round_ratios(times["trainer"], times["self"])
        print(  # what self-launching itself costs: the same Trainer job, started both ways
            f"        self-launched / under torchrun              ratio {median:.3f}"
            f" (median of {args.repeats} per-round ratios; min {low:.3f}, max {high:.3f})"
        )


if __name__ == "__main__":
    main()
