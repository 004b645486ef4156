"""Runs started together in one folder each keep every file they write (issue 30).

Each job is tests/scripts/sweep_job.py, held on a file barrier right before its Trainer is built, so
the runs choose their run folders and checkpoint names at the same moment every time. A run is told
apart by its tag: its hyper-parameter, a metric in every row it logs, and its weights.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.helpers import finish, start

SCRIPT = Path(__file__).parent / "scripts" / "sweep_job.py"
STEPS = 6  # sweep_job.STEPS


def sweep(folder: Path, jobs: int, *extra: str, timeout: float = 240.0) -> list[dict[str, Any]]:
    """Start ``jobs`` runs at once into ``folder``; each one's RESULT, after checking every job ended well."""
    folder.mkdir(parents=True, exist_ok=True)
    procs = [start([str(SCRIPT), str(folder), str(tag), "--jobs", str(jobs), *extra]) for tag in range(1, jobs + 1)]
    done = [finish(proc, timeout) for proc in procs]
    for job in done:
        assert job.returncode == 0, job.output
    results = [json.loads(line[7:]) for job in done for line in job.output.splitlines() if line.startswith("RESULT ")]
    assert sorted(r["tag"] for r in results) == [float(t) for t in range(1, jobs + 1)]
    for job, result in zip(done, sorted(results, key=lambda r: r["tag"])):
        ranks = [line.split()[-1] for line in job.output.splitlines() if line.startswith("LOGDIR ")]
        assert ranks and set(ranks) == {result["log_dir"]}  # every rank writes to the folder rank zero claimed
    return results


def assert_own_files(folder: Path, results: list[dict[str, Any]]) -> None:
    """Each run has its own folder, its own hparams, a whole metrics file of its rows only and its own checkpoints."""
    assert len({r["log_dir"] for r in results}) == len(results)
    assert len({r["last"] for r in results}) == len({r["best"] for r in results}) == len(results)
    for result in results:
        tag, run = result["tag"], folder / result["log_dir"]
        assert yaml.safe_load((run / "hparams.yaml").read_text()) == {"tag": tag}
        with open(run / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [int(row["step"]) for row in rows] == list(range(STEPS))  # whole: every step, once
        assert {float(row["tag"]) for row in rows} == {tag}  # this run's rows only
        for path in (result["last"], result["best"]):
            state = torch.load(folder / path, weights_only=True)
            assert state["hyper_parameters"]["tag"] == tag and state["global_step"] == STEPS
            assert torch.all(state["state_dict"]["net.weight"] == tag)
    files = [p for p in folder.rglob("*") if p.is_file() and "barrier" not in p.parts]
    assert not [p for p in files if p.name.startswith(".") and p.name != ".mlflow.db.lock"]  # no temporaries
    assert not [p for p in files if p.suffix == ".ckpt" and p.stat().st_size == 0]  # no placeholders


@pytest.mark.slow  # 10-16 s end to end on 2 cores: moved out of the 6-minute default run
def test_runs_started_together_each_keep_their_own_files(tmp_path: Path) -> None:
    results = sweep(tmp_path, 4)
    assert sorted(r["log_dir"] for r in results) == [f"runs/lightning_logs/version_{n}" for n in range(4)]
    assert_own_files(tmp_path, results)


@pytest.mark.slow
def test_runs_sharing_a_checkpoint_dirpath_never_replace_each_others_files(tmp_path: Path) -> None:
    results = sweep(tmp_path, 4, "--dirpath", "ckpts")
    assert sorted(Path(r["last"]).name for r in results) == [
        "last-v1.ckpt",
        "last-v2.ckpt",
        "last-v3.ckpt",
        "last.ckpt",
    ]
    assert_own_files(tmp_path, results)
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == sorted(
        [Path(r["last"]).name for r in results] + [Path(r["best"]).name for r in results]
    )
    resumed = start([str(SCRIPT), str(tmp_path), "9", "--jobs", "1", "--dirpath", "ckpts", "--resume"])
    said = finish(resumed, 240).output
    taken = json.loads(said.split("RESULT ", 1)[1].splitlines()[0])["resumed"]
    assert f"ckpt_path='last' resumes {taken}, from the latest of 4 runs" in said, said  # said plainly
    assert taken in {r["last"] for r in results} | {r["best"] for r in results}


@pytest.mark.slow
@pytest.mark.parametrize("logger", ["default", "mlflow"])  # default: TensorBoard, installed with [dev]
def test_other_loggers_started_together_each_claim_their_folder(tmp_path: Path, logger: str) -> None:
    results = sweep(tmp_path, 3, "--logger", logger)
    assert sorted(r["log_dir"] for r in results) == [f"runs/lightning_logs/version_{n}" for n in range(3)]
    for result in results:
        state = torch.load(tmp_path / result["last"], weights_only=True)
        assert state["hyper_parameters"]["tag"] == result["tag"]
    if logger == "mlflow":  # one store made by one of them, and one run each in it
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("lightning_logs")
        runs = client.search_runs([experiment.experiment_id])
        assert sorted(float(run.data.params["tag"]) for run in runs) == [1.0, 2.0, 3.0]
        assert all(run.info.status == "FINISHED" for run in runs)


@pytest.mark.slow
def test_ddp_runs_started_together_each_keep_their_own_files(tmp_path: Path) -> None:
    results = sweep(tmp_path, 2, "--ddp")  # 2 jobs x 2 ranks
    assert sorted(r["log_dir"] for r in results) == ["runs/lightning_logs/version_0", "runs/lightning_logs/version_1"]
    assert_own_files(tmp_path, results)
