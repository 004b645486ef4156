"""Failure cases: runs started together in one folder (a sweep, a job array), each of which must keep every
file it writes. Part of ``CASES`` (tests/faults/cases.py)."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.faults.harness import Case, Check

JOBS = 4

# Each job waits on a file barrier right before its Trainer is built, so the four choose their run
# folders at the same moment; each logs its tag at every step and saves it as a hyper-parameter.
_TOGETHER = f"""
JOBS = {JOBS}
if "job" in sys.argv:
    tag = float(sys.argv[-1])
    Path("barrier").mkdir(exist_ok=True)
    Path("barrier", str(tag)).touch()
    while len(list(Path("barrier").iterdir())) < JOBS:
        time.sleep(0.001)

    class Tagged(Net):
        def __init__(self, tag):
            super().__init__()
            self.save_hyperparameters()

        def training_step(self, batch, batch_idx):
            self.log("tag", self.hparams.tag)
            return super().training_step(batch, batch_idx)

    # The default checkpointing; a CSVLogger for rows the check can read (test_runs_together.py runs the
    # default logger, TensorBoard's, together)
    fit = make_trainer(log_every_n_steps=1, logger=trainer.loggers.CSVLogger("runs"))
    fit.fit(Tagged(tag), loader())
    sys.exit()

import subprocess

jobs = [subprocess.Popen([sys.executable, __file__, "job", str(tag)]) for tag in range(JOBS)]
assert [job.wait() for job in jobs] == [0] * JOBS, "a job failed"
print("DONE", flush=True)
"""


def own_run_folders(jobs: int, steps: int = 8) -> Check:
    """Each of ``jobs`` runs has its own run folder, hparams, whole metrics (its rows only) and last.ckpt."""

    def check(folder: Path, output: str) -> str | None:
        runs = sorted((folder / "runs" / "lightning_logs").glob("version_*"))
        if len(runs) != jobs:
            return f"LOSS: {jobs} runs wrote to {len(runs)} run folder(s)"
        try:
            return next((lost for run in runs if (lost := _lost(run, steps))), None)
        except (OSError, KeyError, ValueError, RuntimeError) as err:
            return f"LOSS: {type(err).__name__}: {err}"[:300]

    return check


def _lost(run: Path, steps: int) -> str | None:
    import torch
    import yaml

    tag = yaml.safe_load((run / "hparams.yaml").read_text())["tag"]
    with open(run / "metrics.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row.get("tag")]
    tags = sorted({float(row["tag"]) for row in rows})
    if tags != [tag] or sorted(int(row["step"]) for row in rows) != list(range(steps)):
        return f"LOSS: {run.name}/metrics.csv holds {len(rows)} rows of runs {tags}, not the {steps} of run {tag}"
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    if state["hyper_parameters"]["tag"] != tag or state["global_step"] != steps:
        return f"LOSS: {run.name}/checkpoints/last.ckpt is run {state['hyper_parameters']['tag']}'s, not {tag}'s"
    return None


SHARED_FOLDER = [
    Case(
        "runs-started-together",
        _TOGETHER,
        says=("DONE",),
        expect="OK",
        checks=(own_run_folders(JOBS),),
        deadline=180.0,  # four interpreters start at once on a shared 2-core machine
    ),
]
