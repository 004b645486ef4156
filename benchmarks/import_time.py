"""How much ``import trainer`` adds to ``import torch`` (target: < 0.1 s; Lightning adds 1.3 s).

Each measurement is a fresh interpreter; the two commands alternate and medians are compared. Both
load bytecode (the package is byte-compiled first, as an installed one is), not source.

    python benchmarks/import_time.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from interleave import byte_compile_trainer, interleaved


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    byte_compile_trainer()
    wall("import torch, trainer")  # warm the file cache
    torch_only, with_trainer = interleaved(
        lambda: wall("import torch"), lambda: wall("import torch, trainer"), args.repeats
    )
    base, ours = statistics.median(torch_only), statistics.median(with_trainer)
    print(f"import torch          : {base:.3f} s (median of {args.repeats})")
    print(f"import torch, trainer : {ours:.3f} s")
    print(f"added by trainer      : {ours - base:+.3f} s  (target < 0.100 s; Lightning adds 1.3 s)")


if __name__ == "__main__":
    main()
