"""Killed, signalled or interrupted runs lose nothing and resume to the same result."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parent / "scripts" / "resumable_run.py"
ROOT = Path(__file__).parent.parent


def start(out: Path, *args: str, session: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=session,
    )


def finish(out: Path, *args: str, timeout: float = 120) -> str:
    proc = start(out, *args)
    output, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, output
    return output


def final_params(out: Path, rank: int = 0) -> list[torch.Tensor]:
    return torch.load(out / f"final-rank{rank}.pt", weights_only=True)


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), "resumed run differs from the uninterrupted one"


def timed_run(out: Path, *args: str) -> float:
    """Run to the end; return the seconds from the first checkpoint to the exit (the kill window)."""
    proc = start(out, *args, "--sleep", "0.02")
    wait_for(out / "ckpts" / "last.ckpt")
    began = time.monotonic()
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    return time.monotonic() - began


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[torch.Tensor]:
    out = tmp_path_factory.mktemp("reference")
    finish(out)
    return final_params(out)


@pytest.fixture(scope="module")
def kill_window(tmp_path_factory: pytest.TempPathFactory) -> float:
    return timed_run(tmp_path_factory.mktemp("timing"))


DDP = ("--strategy", "ddp", "--devices", "2")


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> list[list[torch.Tensor]]:
    out = tmp_path_factory.mktemp("ddp-reference")
    finish(out, *DDP)
    return [final_params(out, rank) for rank in (0, 1)]


@pytest.fixture(scope="module")
def ddp_kill_window(tmp_path_factory: pytest.TempPathFactory) -> float:
    return timed_run(tmp_path_factory.mktemp("ddp-timing"), *DDP)


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_sigterm_saves_and_exits_cleanly_then_resumes_exactly(tmp_path: Path, reference: list[torch.Tensor]) -> None:
    proc = start(tmp_path, "--sleep", "0.02")
    wait_for(tmp_path / "ckpts" / "last.ckpt")
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "SIGTERM received; saved" in output
    assert (tmp_path / "ckpts" / "interrupted.ckpt").is_file()
    assert not (tmp_path / "final-rank0.pt").exists()  # it stopped early
    finish(tmp_path, "--resume")
    assert_same(final_params(tmp_path), reference)


def test_sigterm_to_the_whole_process_group_spares_dataloader_workers(
    tmp_path: Path, reference: list[torch.Tensor]
) -> None:
    """SLURM signals every process of the job, DataLoader workers included: the save must still happen."""
    proc = start(tmp_path, "--sleep", "0.02", session=True)
    wait_for(tmp_path / "ckpts" / "last.ckpt")
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "SIGTERM received; saved" in output
    finish(tmp_path, "--resume")
    assert_same(final_params(tmp_path), reference)


def test_ctrl_c_saves_interrupted_checkpoint_and_reraises(tmp_path: Path, reference: list[torch.Tensor]) -> None:
    proc = start(tmp_path, "--sleep", "0.02")
    wait_for(tmp_path / "ckpts" / "last.ckpt")
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, output
    assert "KeyboardInterrupt" in output
    assert (tmp_path / "ckpts" / "interrupted.ckpt").is_file()
    finish(tmp_path, "--resume")
    assert_same(final_params(tmp_path), reference)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(12))
def test_sigkill_at_a_random_moment_then_resume_is_exact(
    tmp_path: Path, reference: list[torch.Tensor], kill_window: float, attempt: int
) -> None:
    """SIGKILL lands anywhere: mid-step, mid-save, in a worker; the newest checkpoint resumes exactly."""
    delay = random.Random(attempt).uniform(0.0, 0.7 * kill_window)  # kills land inside the training
    proc = start(tmp_path, "--sleep", "0.02")  # ~5 s of training after the first checkpoint
    wait_for(tmp_path / "ckpts" / "last.ckpt")
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before the kill: the test would prove nothing"
    proc.kill()
    proc.wait()
    finish(tmp_path, "--resume")
    assert_same(final_params(tmp_path), reference)
    assert not list((tmp_path / "ckpts").glob(".*.tmp-*")), "a stale temporary survived the resume"


@pytest.mark.slow
def test_ddp_sigterm_saves_once_and_every_rank_exits_cleanly(
    tmp_path: Path, ddp_reference: list[list[torch.Tensor]]
) -> None:
    proc = start(tmp_path, *DDP, "--sleep", "0.02")
    wait_for(tmp_path / "ckpts" / "last.ckpt")
    proc.send_signal(signal.SIGTERM)  # rank 0 only: the ranks must still agree on where to stop
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert output.count("SIGTERM received; saved") == 1
    finish(tmp_path, *DDP, "--resume")
    for rank in (0, 1):
        assert_same(final_params(tmp_path, rank), ddp_reference[rank])


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(8))
def test_ddp_sigkill_at_a_random_moment_then_resume_is_exact(
    tmp_path: Path, ddp_reference: list[list[torch.Tensor]], ddp_kill_window: float, attempt: int
) -> None:
    """SIGKILL to the launching rank takes the whole 2-rank job down; the resume is exact on both ranks."""
    delay = random.Random(100 + attempt).uniform(0.0, 0.7 * ddp_kill_window)
    proc = start(tmp_path, *DDP, "--sleep", "0.02")
    wait_for(tmp_path / "ckpts" / "last.ckpt")
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before the kill: the test would prove nothing"
    proc.kill()
    proc.wait()
    time.sleep(0.5)  # rank 1 dies with its parent (PDEATHSIG)
    finish(tmp_path, *DDP, "--resume")
    for rank in (0, 1):
        assert_same(final_params(tmp_path, rank), ddp_reference[rank])
