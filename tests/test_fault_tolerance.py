"""Killed, signalled or interrupted runs lose nothing and resume to the same result."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import stacks_then_kill

SCRIPT = Path(__file__).parent / "scripts" / "resumable_run.py"
ROOT = Path(__file__).parent.parent


def start(out: Path, *args: str, session: bool = False) -> subprocess.Popen[str]:
    # PYTHONFAULTHANDLER: a job that outlives its deadline is sent SIGABRT, and every process of it (ranks,
    # DataLoader workers) prints each thread's stack before it dies, so a hang reports where it waited.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=session,
    )


def finish(out: Path, *args: str, timeout: float = 120) -> str:
    proc = start(out, *args, session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s; its stacks:\n{stacks_then_kill(proc)}") from None
    assert proc.returncode == 0, output
    return output


def final_params(out: Path, rank: int = 0) -> list[torch.Tensor]:
    return torch.load(out / f"final-rank{rank}.pt", weights_only=True)


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), "resumed run differs from the uninterrupted one"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[torch.Tensor]:
    out = tmp_path_factory.mktemp("reference")
    finish(out)
    return final_params(out)


DDP = ("--strategy", "ddp", "--devices", "2")


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> list[list[torch.Tensor]]:
    out = tmp_path_factory.mktemp("ddp-reference")
    finish(out, *DDP)
    return [final_params(out, rank) for rank in (0, 1)]


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# ---- SIGKILL at an announced moment --------------------------------------------------------------
SINGLE_STEPS = 30  # 160 samples in batches of 16, 3 epochs
DDP_STEPS = 15  # each of the 2 ranks gets half of every epoch


def kill_points(seed: int, attempts: int, total_steps: int) -> list[pytest.ParameterSet]:
    """The announcement after which each attempt kills the run, alternately mid-step (``STEP=n``) and mid-save
    (``SAVE=n``). Distinct n from a seeded RNG, 2 or more steps in (so there is a checkpoint to resume) and 5 or more
    before the end (about 0.1 s of work, so the run cannot finish before the kill reaches it)."""
    steps = random.Random(seed).sample(range(2, total_steps - 4), attempts)
    kinds = [("STEP", "mid-step"), ("SAVE", "mid-save")]
    return [pytest.param(f"{kinds[i % 2][0]}={n}", id=f"{kinds[i % 2][1]}-{n}") for i, n in enumerate(steps)]


class Output:
    """A running job's output, read on a thread: the test waits for one line without blocking forever."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)  # every process that held the pipe (ranks, workers) is gone

    def wait_for(self, wanted: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {wanted!r} within {timeout}s; output so far:\n{self.text}") from None
            if line is None:
                raise AssertionError(f"the run ended before {wanted!r}; output:\n{self.text}")
            self.lines.append(line)
            if line == wanted:
                return

    def wait_for_end(self, timeout: float = 60) -> None:
        self._reader.join(timeout)
        assert not self._reader.is_alive(), f"a process of the killed job outlived it; output:\n{self.text}"
        while (line := self._queue.get_nowait()) is not None:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def sigkill_after(out: Path, announcement: str, *args: str) -> None:
    """Start a run, SIGKILL its launching process as soon as it announces ``announcement``, and return once every
    process of the job (other ranks, DataLoader workers) is gone, so the resume starts on a dead job."""
    proc = start(out, *args, "--sleep", "0.02")
    output = Output(proc)
    try:
        output.wait_for(announcement)
    finally:
        proc.kill()  # also when the wait failed: no run outlives its test
    assert proc.wait() == -signal.SIGKILL, f"the run ended before the kill; output:\n{output.text}"
    output.wait_for_end()
    assert not (out / "final-rank0.pt").exists()


def resume(out: Path, *args: str) -> int:
    """Finish the killed run from its newest checkpoint; return the global step it resumed at."""
    starts = [line for line in finish(out, *args, "--resume").splitlines() if line.startswith("START=")]
    assert len(starts) == 1, starts
    return int(starts[0].removeprefix("START="))


def assert_resumed_where_killed(resumed_at: int, announcement: str, total_steps: int) -> None:
    """After ``STEP=n`` checkpoint n is complete; after ``SAVE=n`` its write may not have finished (it is atomic),
    and then the resume uses checkpoint n - 1. Resuming at the end would mean the kill came too late to test."""
    kind, step = announcement.split("=")
    earliest = int(step) - 1 if kind == "SAVE" else int(step)
    assert earliest <= resumed_at < total_steps, f"killed after {announcement}, resumed at step {resumed_at}"


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


@pytest.mark.slow  # 10-16 s end to end on 2 cores: moved out of the 6-minute default run
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
@pytest.mark.parametrize("announcement", kill_points(0, 12, SINGLE_STEPS))
def test_sigkill_at_a_random_moment_then_resume_is_exact(
    tmp_path: Path, reference: list[torch.Tensor], announcement: str
) -> None:
    """SIGKILL lands mid-step (a DataLoader worker busy too) or mid-save; the newest checkpoint resumes exactly."""
    sigkill_after(tmp_path, announcement)
    assert_resumed_where_killed(resume(tmp_path), announcement, SINGLE_STEPS)
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


FSDP = ("--strategy", "fsdp", "--devices", "2")


@pytest.fixture(scope="module")
def fsdp_reference(tmp_path_factory: pytest.TempPathFactory) -> list[torch.Tensor]:
    out = tmp_path_factory.mktemp("fsdp-reference")
    finish(out, *FSDP)
    return final_params(out)


@pytest.mark.slow
@pytest.mark.parametrize("announcement", kill_points(2, 2, DDP_STEPS))
def test_fsdp_sigkill_mid_sharded_save_or_step_then_resume_is_exact(
    tmp_path: Path, fsdp_reference: list[torch.Tensor], ddp_reference: list[list[torch.Tensor]], announcement: str
) -> None:
    """Sharded ``last.ckpt/`` directories, rewritten every step: a kill leaves one that resumes exactly."""
    sigkill_after(tmp_path, announcement, *FSDP)
    assert_resumed_where_killed(resume(tmp_path, *FSDP), announcement, DDP_STEPS)
    assert_same(final_params(tmp_path), fsdp_reference)
    assert not list((tmp_path / "ckpts").glob(".*.tmp-*")), "a stale temporary survived the resume"
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fsdp_reference, ddp_reference[0], strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("announcement", kill_points(1, 8, DDP_STEPS))
def test_ddp_sigkill_at_a_random_moment_then_resume_is_exact(
    tmp_path: Path, ddp_reference: list[list[torch.Tensor]], announcement: str
) -> None:
    """SIGKILL to the launching rank takes the whole 2-rank job down; the resume is exact on both ranks."""
    sigkill_after(tmp_path, announcement, *DDP)
    assert_resumed_where_killed(resume(tmp_path, *DDP), announcement, DDP_STEPS)
    for rank in (0, 1):
        assert_same(final_params(tmp_path, rank), ddp_reference[rank])
