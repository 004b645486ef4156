"""Elastic restarts: torchrun restarts the group after a rank dies, and fit resumes this run's newest checkpoint."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import trainer.checkpoint.elastic as elastic
from tests.helpers import REPO_ROOT, run_python
from trainer.checkpoint import save_checkpoint
from trainer.launch import elastic_restart, process_start_time
from trainer.strategies import SingleDeviceStrategy

JOB = REPO_ROOT / "tests" / "scripts" / "elastic_job.py"


# ---- detection ---------------------------------------------------------------------------------
def test_a_first_attempt_or_no_torchrun_is_no_restart() -> None:
    assert elastic_restart({}) is None
    assert elastic_restart({"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_RUN_ID": "job"}) is None
    assert elastic_restart({"TORCHELASTIC_RESTART_COUNT": "2"}) is None  # not torchelastic's full set


def test_a_restart_names_its_count_run_and_torchruns_start() -> None:
    restart = elastic_restart({"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_RUN_ID": "job"})
    assert restart is not None and (restart.count, restart.run_id) == (2, "job")
    assert restart.started_at == process_start_time(os.getppid())


def test_process_start_time_is_when_this_process_started() -> None:
    started = process_start_time(os.getpid())
    assert started is not None and time.time() - 600 < started <= time.time()


# ---- precedence ----------------------------------------------------------------------------------
def fake_trainer(root: Path) -> Any:
    """What ``fit_checkpoint_path`` reads: the strategy, rank zero, the checkpoint folders, the loggers."""
    callback = SimpleNamespace(dirpath=root / "ckpts")
    return SimpleNamespace(
        strategy=SingleDeviceStrategy(),
        is_global_zero=True,
        checkpoint_callbacks=[callback],
        default_root_dir=root,
        loggers=[],
    )


def write(path: Path, mtime: float) -> Path:
    save_checkpoint({"at": path.name}, path)
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def restarted(monkeypatch: pytest.MonkeyPatch) -> float:
    """This process as torchrun's restart 1 of a run that started 100 seconds ago."""
    started = time.time() - 100
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.setattr("trainer.launch.process_start_time", lambda pid: started)
    monkeypatch.setattr(elastic, "_resumed_in_this_process", False)
    return started


def test_on_a_restart_this_runs_newest_checkpoint_wins_over_ckpt_path(
    tmp_path: Path, restarted: float, capsys: pytest.CaptureFixture[str]
) -> None:
    given = write(tmp_path / "given.ckpt", restarted - 1000)  # the run was started from it
    newest = write(tmp_path / "ckpts" / "step=6.ckpt", restarted + 50)
    write(tmp_path / "ckpts" / "step=4.ckpt", restarted + 40)
    assert elastic.fit_checkpoint_path(fake_trainer(tmp_path), str(given)) == newest
    out = capsys.readouterr().out
    assert f"steadytrain: elastic restart 1: resuming from {newest} (newer than ckpt_path='{given}')." in out
    # only the first fit of a restarted process resumes by itself; a later one does as told
    assert elastic.fit_checkpoint_path(fake_trainer(tmp_path), str(given)) == given


def test_a_restart_before_any_checkpoint_of_this_run_falls_back_to_ckpt_path(
    tmp_path: Path, restarted: float, capsys: pytest.CaptureFixture[str]
) -> None:
    given = write(tmp_path / "given.ckpt", restarted - 1000)
    write(tmp_path / "ckpts" / "older-run.ckpt", restarted - 10)  # an earlier run's, same folder
    assert elastic.fit_checkpoint_path(fake_trainer(tmp_path), str(given)) == given
    assert "no checkpoint of this run yet; starting from ckpt_path=" in capsys.readouterr().out
    elastic._resumed_in_this_process = False
    assert elastic.fit_checkpoint_path(fake_trainer(tmp_path), None) is None


def test_without_a_restart_ckpt_path_is_used_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    given = write(tmp_path / "given.ckpt", time.time() - 1000)
    write(tmp_path / "ckpts" / "newer.ckpt", time.time())
    assert elastic.fit_checkpoint_path(fake_trainer(tmp_path), str(given)) == given
    assert elastic.fit_checkpoint_path(fake_trainer(tmp_path), None) is None


# ---- the real thing --------------------------------------------------------------------------------
def torchrun(job: Path, out: Path, *extra: str) -> Any:
    args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--max-restarts", "1"]
    return run_python([*args, str(job), str(out), *extra], timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_killed_rank_is_restarted_and_the_run_ends_bitwise_equal(tmp_path: Path, strategy: str) -> None:
    job = Path(shutil.copy(JOB, tmp_path / "elastic_job.py"))
    killed = torchrun(job, tmp_path / "killed", "--kill", "--strategy", strategy)
    assert killed.returncode == 0, killed.output
    output = killed.output
    restart_after = killed.marker_time("ATTEMPT1") - killed.marker_time("KILL")
    print(f"the restarted attempt began {restart_after:.1f}s after the kill")
    assert restart_after < 20, output  # the survivor's failure did not hold torchrun's restart back
    ckpts = tmp_path / "killed" / "ckpts"
    assert f"steadytrain: elastic restart 1: resuming from {ckpts / 'last.ckpt'}." in output, output
    assert "resumed from" in output and "at epoch 0, step 6." in output  # mid-epoch: 8 steps per epoch
    assert not [p.name for p in ckpts.iterdir() if ".tmp-" in p.name]  # the killed save's leftovers
    straight = torchrun(job, tmp_path / "straight", "--strategy", strategy)
    assert straight.returncode == 0, straight.output
    assert "elastic restart" not in straight.output
    resumed = torch.load(tmp_path / "killed" / "final.pt")
    reference = torch.load(tmp_path / "straight" / "final.pt")
    assert resumed.keys() == reference.keys()
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)
