"""The overhead benchmark in CPU instructions instead of seconds: noise-free where wall time is not.

Runs the raw loop and the Trainer of ``overhead.py`` under valgrind (callgrind) at two step
counts and divides the difference by the extra steps, so start-up and fit set-up cancel out.
On a shared VM wall time drifts by several percent between runs; an instruction count does not
(it misses cache and branch effects, so wall-time overhead is somewhat larger). Needs valgrind;
takes a few minutes.

    python benchmarks/overhead_instructions.py [--steps 200 1200]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def run_once(loop: str, steps: int) -> int:
    """Instructions executed by one process that runs ``loop`` for ``steps`` steps (after a warm-up)."""
    script = Path(__file__).with_name("overhead.py")
    code = (
        f"import sys; sys.path.insert(0, {str(script.parent)!r}); import torch; import overhead as o; "
        f"torch.set_num_threads(1); f = o.{loop}; f(50); f({steps})"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stderr
    match = re.search(r"Collected\s*:\s*([\d,]+)", out)
    assert match, out[-2000:]
    return int(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs=2, default=[200, 1200], metavar=("FEW", "MANY"))
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed; this benchmark counts instructions with callgrind.")
    few, many = args.steps
    jobs = [(loop, n) for loop in ("raw_loop", "trainer_loop") for n in (few, many)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: run_once(*job), jobs)))
    raw, ours = ((counts[(loop, many)] - counts[(loop, few)]) / (many - few) for loop in ("raw_loop", "trainer_loop"))
    print(f"raw PyTorch loop : {raw:10.0f} instructions/step")
    print(f"steadytrain      : {ours:10.0f} instructions/step")
    print(f"ratio            : {ours / raw:.3f}  (wall-time target <= 1.05)")


if __name__ == "__main__":
    main()
