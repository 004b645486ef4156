"""Jobs whose DataLoaders have worker processes end by themselves: success, errors, a dead worker.

Each case is a real process with a deadline: it must end within ``DEADLINE_S`` seconds on its own,
with exit 0 after a good run and a non-zero exit showing the cause otherwise. Before the fix, each
of these ran forever: workers inherited a blocked SIGTERM and ignored the shutdown their parent
sent them at exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO_ROOT, assert_no_leftovers, finish, run_python, start

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "worker_job.py")
DEADLINE_S = 20.0
DDP = ["--strategy", "ddp", "--devices", "2"]


def run_job(out: Path, *args: str) -> tuple[int, str]:
    done = run_python([SCRIPT, str(out), *args], timeout=DEADLINE_S * 2)
    assert done.seconds < DEADLINE_S, f"the job took {done.seconds:.1f}s to end:\n{done.output}"
    assert_no_leftovers(str(out))  # workers and ranks are gone too
    return done.returncode, done.output


@pytest.mark.parametrize("persistent", [False, True], ids=["workers", "persistent-workers"])
def test_a_good_run_with_workers_exits_zero(tmp_path: Path, persistent: bool) -> None:
    code, output = run_job(tmp_path, "--case", "good", *(["--persistent"] if persistent else []))
    assert code == 0, output
    assert "done rank 0 step 24" in output


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("raise", "RuntimeError: boom in training_step"),
        ("kill-worker", "DataLoader worker (pid"),
        ("nan", "FloatingPointError: training_step returned a non-finite loss"),
    ],
)
def test_a_failing_run_with_persistent_workers_exits_nonzero_with_its_error(
    tmp_path: Path, case: str, message: str
) -> None:
    code, output = run_job(tmp_path, "--case", case, "--persistent")
    assert code != 0, output
    assert message in output


@pytest.mark.slow
@pytest.mark.parametrize("case", ["raise", "kill-worker", "nan"])
def test_a_failing_run_with_workers_exits_nonzero(tmp_path: Path, case: str) -> None:
    code, output = run_job(tmp_path, "--case", case)
    assert code != 0, output
    assert "Error" in output


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True], ids=["workers", "persistent-workers"])
def test_ddp_with_workers_exits_zero_and_a_raising_rank_ends_the_job(tmp_path: Path, persistent: bool) -> None:
    flags = ["--persistent"] if persistent else []
    code, output = run_job(tmp_path / "good", "--case", "good", *DDP, *flags)
    assert code == 0, output
    code, output = run_job(tmp_path / "raise", "--case", "raise", *DDP, *flags)
    assert code != 0, output
    assert "[rank1]: RuntimeError: boom in training_step" in output


@pytest.mark.slow
def test_the_recipe_with_workers_exits(tmp_path: Path) -> None:
    done = run_python(
        [
            str(REPO_ROOT / "recipes" / "unet_carvana.py"),
            "fit",
            "--config",
            str(REPO_ROOT / "recipes" / "unet_carvana.yaml"),
            "--data.num_workers",
            "2",
            "--data.root",
            str(tmp_path / "data"),
            "--data.n_images",
            "24",
            "--trainer.max_epochs",
            "1",
            "--trainer.default_root_dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        timeout=240,
    )
    assert done.returncode == 0, done.output
    assert_no_leftovers(str(tmp_path))


def test_a_worker_leaves_stop_signals_to_its_parent_but_obeys_its_shutdown() -> None:
    """In-process check of the worker set-up: a SIGTERM from elsewhere is dropped, the parent's ends it."""
    code = (
        "import os, signal, time, sys\n"
        "from trainer.signals import leave_stop_signals_to_parent\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    leave_stop_signals_to_parent(os.getppid())\n"
        "    time.sleep(30)\n"
        "    os._exit(3)\n"
        "time.sleep(1.0)\n"
        "other = os.fork()\n"
        "if other == 0:\n"
        "    os.kill(pid, signal.SIGTERM); os.kill(pid, signal.SIGINT); os._exit(0)\n"
        "os.waitpid(other, 0)\n"
        "time.sleep(0.5)\n"
        "assert os.waitpid(pid, os.WNOHANG) == (0, 0), 'a stranger signal ended the worker'\n"
        "os.kill(pid, signal.SIGTERM)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('exit', os.waitstatus_to_exitcode(status))\n"
    )
    done = run_python(["-c", code], timeout=20)
    assert done.returncode == 0, done.output
    assert "exit 0" in done.output


def test_stop_signals_are_restored_after_fit_in_the_main_process() -> None:
    code = (
        "import signal, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "import trainer\n"
        "from tests.models import Regressor, regression_data, quiet\n"
        "before = signal.getsignal(signal.SIGTERM)\n"
        "quiet('/tmp', max_epochs=1).fit(Regressor(), DataLoader(regression_data(), batch_size=8, num_workers=1))\n"
        "assert signal.getsignal(signal.SIGTERM) is before\n"
        "assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGTERM, signal.SIGINT}\n"
        "print('ok')\n"
    )
    done = run_python(["-c", code], timeout=60)
    assert done.returncode == 0, done.output
    assert "ok" in done.output


assert signal.SIGTERM  # the module needs POSIX signals


def wait_for_step(proc: subprocess.Popen[str], step: int, deadline: float = 60.0) -> list[str]:
    """Read the job's output until it announces ``STEP=<step>``; return the lines read."""
    lines: list[str] = []
    end = time.monotonic() + deadline
    assert proc.stdout is not None
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == f"STEP={step}":
            return lines
    shown = "".join(lines)
    raise AssertionError(f"the job never announced STEP={step}:\n{shown}")


@pytest.mark.parametrize(
    ("persistent", "to_group"),
    [
        pytest.param(True, True, id="persistent-workers-whole-group"),
        pytest.param(True, False, id="persistent-workers-main-process", marks=pytest.mark.slow),
        pytest.param(False, True, id="workers-whole-group", marks=pytest.mark.slow),
        pytest.param(False, False, id="workers-main-process", marks=pytest.mark.slow),
    ],
)
def test_sigterm_mid_epoch_with_workers_saves_exits_and_resumes_exactly(
    tmp_path: Path, persistent: bool, to_group: bool
) -> None:
    """Random augmentation runs in the workers; the resumed run must end bitwise equal."""
    flags = ["--case", "sigterm", "--epochs", "2", *(["--persistent"] if persistent else [])]
    reference = run_python([SCRIPT, str(tmp_path / "full"), *flags], timeout=120)
    assert reference.returncode == 0, reference.output
    out = tmp_path / "stopped"
    proc = start([SCRIPT, str(out), *flags])
    wait_for_step(proc, 15)  # epoch 1, 3 batches in
    if to_group:
        os.killpg(proc.pid, signal.SIGTERM)  # SLURM, Kubernetes, `timeout`: every process of the job
    else:
        proc.send_signal(signal.SIGTERM)
    done = finish(proc, timeout=DEADLINE_S)
    assert done.returncode == 0, done.output
    assert "SIGTERM received; saved" in done.output
    assert not (out / "final-rank0.pt").exists()
    resumed = run_python([SCRIPT, str(out), *flags, "--resume"], timeout=120)
    assert resumed.returncode == 0, resumed.output
    want = torch.load(tmp_path / "full" / "final-rank0.pt", weights_only=True)
    got = torch.load(out / "final-rank0.pt", weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert_no_leftovers(str(out))


class _Worker:
    def __init__(self, pid: int, exitcode: int | None) -> None:
        self.pid, self.exitcode = pid, exitcode

    def is_alive(self) -> bool:
        return self.exitcode is None


class _HandOffFails:
    """torch's multi-process iterator as it is when a worker dies while passing a tensor's descriptor."""

    def __init__(self, workers: list[_Worker]) -> None:
        self._workers = workers

    def __next__(self) -> None:
        raise ConnectionResetError(104, "Connection reset by peer")


def test_a_worker_killed_mid_hand_off_is_named() -> None:
    from trainer.signals import NamesDeadWorkers

    batches = NamesDeadWorkers(_HandOffFails([_Worker(11, None), _Worker(12, -signal.SIGKILL)]))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) 12, killed by SIGKILL\) exited unexpectedly"):
        next(batches)
    alive = NamesDeadWorkers(_HandOffFails([_Worker(11, None)]), grace=0.05)  # type: ignore[arg-type]
    with pytest.raises(ConnectionResetError):  # no worker died: the error is not the loader's to rename
        next(alive)
