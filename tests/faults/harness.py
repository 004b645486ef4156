"""Run one failure case as a real job and classify how it ended.

A case is a small user script (``PRELUDE`` + its own lines) run in its own folder and process
group, with a deadline. Faults come from the script itself (a bad flag, a dying worker) or from
outside: ``Signal`` sends a signal once the job has printed a marker N times (and, for mid-save
faults, once a checkpoint temporary exists), never after a wall-clock sleep. ``Mount`` puts a
size-limited or read-only tmpfs under the folder (root only; the case is skipped elsewhere).

Classes, in the order they are decided:

- HANG: the deadline passed (the whole process group is killed), or processes outlived the job;
- LOSS / SILENT: a check after the run found a checkpoint or log lost or torn, a payload run,
  or a follow-up resume that failed;
- OK / SILENT: exit 0 (or killed by our own SIGKILL): OK where the case expects a good run,
  SILENT where the bad input should have been refused;
- CLEAR / TRACEBACK: a non-zero exit whose final error line (or a ``steadytrain:`` note) holds
  every text the case expects, or not;
- MISSED (the fault was never injected), SKIP (no mount here), ERROR (a preparing run failed):
  the harness could not judge the case.

Nothing here needs pytest: ``benchmarks/faults.py`` uses it too.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import clean_env, processes_running

CLASSES = ("CLEAR", "OK", "TRACEBACK", "HANG", "SILENT", "LOSS")
NOT_JUDGED = ("MISSED", "SKIP", "ERROR")

# The user's script starts with this; each case adds the lines that make its fault.
PRELUDE = '''\
"""A user's training script for the failure catalogue (tests/faults)."""

import os
import shutil
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import trainer

torch.set_num_threads(1)
RESUME = "resume" in sys.argv[1:]


class Net(trainer.Module):
    def __init__(self, features: int = 8, hidden: int = 16, step_s: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
        self.step_s = step_s

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(self.step_s)  # stands in for real work, so a signal lands mid-run
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def dataset(n: int = 64, features: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    return TensorDataset(x, x.mean(dim=1, keepdim=True))


def loader(n: int = 64, batch_size: int = 8, features: int = 8, **kwargs) -> DataLoader:
    return DataLoader(dataset(n, features), batch_size=batch_size, **kwargs)


class Announce(trainer.Callback):
    """Print each finished step, flushed, so whoever watches the log knows where the run is."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.is_global_zero:
            print(f"STEP={trainer.global_step}", flush=True)


def every_step(dirpath: str = "ckpts") -> trainer.ModelCheckpoint:
    """Keep last.ckpt after every step."""
    return trainer.ModelCheckpoint(dirpath=dirpath, every_n_train_steps=1, save_top_k=0)


def make_trainer(**flags) -> trainer.Trainer:
    """This project's usual Trainer: CPU, no progress bar, one epoch unless told otherwise."""
    defaults = dict(
        accelerator="cpu", max_epochs=1, enable_progress_bar=False, num_sanity_val_steps=0, default_root_dir="runs"
    )
    return trainer.Trainer(**{**defaults, **flags})


def done(fit: trainer.Trainer) -> None:
    print(f"DONE rank={fit.global_rank} step={fit.global_step}", flush=True)


# ---- the case ----------------------------------------------------------------------------------
'''

# The last line of a traceback (``[rankN]: `` prefix allowed): ``SomeError: text`` or a bare name.
_ERROR_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Warning)(?::.*)?)$"
)
_NOTE = re.compile(r"^(?:\[rank\d+\]:\s*)?(steadytrain: .*)$")


@dataclass(frozen=True)
class Signal:
    """Send ``signum`` once ``after`` was printed ``count`` times and ``file`` (a glob) exists.

    ``to``: "main" (the script's process), "group" (every process of the job, as SLURM does),
    or a printed prefix such as ``"PID1="`` whose value is the pid to signal.
    """

    signum: int
    after: str | None = "STEP="
    count: int = 1
    file: str | None = None
    file_bytes: int = 0  # ... and holds this much: the save is writing its data, not opening the file
    to: str = "main"


@dataclass(frozen=True)
class Mount:
    """A tmpfs of ``size`` at ``<folder>/<path>``: read-only, or filled up, if asked."""

    path: str = "mnt"
    size: str = "1m"
    read_only: bool = False
    fill: bool = False


# A check looks at the folder and the job's output after the run; it returns None when all is
# well, else "LOSS: why" or "SILENT: why".
Check = Callable[[Path, str], "str | None"]


@dataclass(frozen=True)
class Case:
    """One failure: the script lines that cause it and how the job must end."""

    name: str
    script: str
    says: tuple[str, ...] = ()  # texts the final message must hold (CLEAR), or the output (OK)
    expect: str = "CLEAR"
    argv: tuple[str, ...] = ()
    prepare: tuple[tuple[str, ...], ...] = ()  # runs of the same script (argv) that must succeed first
    signals: tuple[Signal, ...] = ()
    mount: Mount | None = None
    checks: tuple[Check, ...] = ()
    resume: tuple[str, ...] | None = None  # a follow-up run (argv) that must end with "DONE"
    deadline: float = 60.0
    known: str | None = None  # how it fails today: the pytest suite marks it xfail(strict=True)

    def source(self) -> str:
        return PRELUDE + textwrap.dedent(self.script).strip() + "\n"


@dataclass
class Outcome:
    """How a case ended: its class, the main run's seconds, and its final message."""

    name: str
    expected: str
    got: str
    seconds: float
    message: str
    detail: str = ""
    output: str = field(default="", repr=False)

    @property
    def passed(self) -> bool:
        return self.got == self.expected


# ---- running a job --------------------------------------------------------------------------------
class Job:
    """A script running in its own process group; its output is read line by line as it comes."""

    def __init__(self, script: Path, argv: tuple[str, ...]) -> None:
        self.folder = script.parent
        self.began = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *argv],
            cwd=script.parent,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.eof = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.eof = True
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def left(self, deadline: float) -> float:
        return deadline - (time.monotonic() - self.began)

    def wait_for_lines(self, prefix: str, count: int, deadline: float) -> bool:
        """Until ``prefix`` starts ``count`` lines; False if the job ended or the deadline came first."""
        with self._changed:
            while sum(line.startswith(prefix) for line in self.lines) < count:
                if self.eof or self.left(deadline) <= 0:
                    return False
                self._changed.wait(timeout=min(self.left(deadline), 0.5))
        return True

    def printed_pids(self, prefix: str) -> list[int]:
        """The pids printed after ``prefix`` (e.g. ``PID1=``), wherever they stand in a line: two ranks
        share the pipe, and unbuffered output interleaves one rank's text with the other's newline."""
        with self._changed:
            text = "\n".join(self.lines)
        return [int(pid) for pid in re.findall(rf"{re.escape(prefix)}(\d+)", text)]

    def wait_for_pid(self, prefix: str, deadline: float) -> bool:
        """Until a pid follows ``prefix`` in the output; False if the job ended or the deadline came first."""
        with self._changed:
            while not self.printed_pids(prefix):
                if self.eof or self.left(deadline) <= 0:
                    return False
                self._changed.wait(timeout=min(self.left(deadline), 0.5))
        return True

    def wait_for_file(self, pattern: str, size: int, deadline: float) -> bool:
        """Poll (every 0.2 ms: a save lasts milliseconds) until ``pattern`` matches a file of ``size`` bytes."""
        full = str(self.folder / pattern)
        while not any(_size(path) >= size for path in glob.glob(full)):
            if self.proc.poll() is not None or self.left(deadline) <= 0:
                return False
            time.sleep(0.0002)
        return True

    def send(self, sig: Signal) -> None:
        if sig.to == "group":
            os.killpg(self.proc.pid, sig.signum)
            return
        pid = self.proc.pid
        if sig.to != "main":
            pid = self.printed_pids(sig.to)[-1]
        os.kill(pid, sig.signum)

    def inject(self, signals: tuple[Signal, ...], deadline: float) -> str | None:
        """Send each signal at its moment; returns why one could not be sent, else None."""
        for sig in signals:
            if sig.after is not None and not self.wait_for_lines(sig.after, sig.count, deadline):
                return f"{sig.after!r} was never printed {sig.count} time(s)"
            if sig.to.endswith("=") and not self.wait_for_pid(sig.to, deadline):
                return f"no {sig.to!r} line to read the pid from"
            if sig.file is not None and not self.wait_for_file(sig.file, sig.file_bytes, deadline):
                return f"{sig.file!r} never appeared while the job ran"
            try:
                self.send(sig)
            except ProcessLookupError:
                return f"the process for {signal.Signals(sig.signum).name} was already gone"
        return None

    def finish(self, deadline: float) -> tuple[int | None, float]:
        """Wait for the exit and the end of the output (every process holding the pipe gone).

        At the deadline the whole process group is killed; returns (None, seconds) then.
        """
        with self._changed:
            while not self.eof and self.left(deadline) > 0:
                self._changed.wait(timeout=min(self.left(deadline), 0.5))
        try:
            code = self.proc.wait(timeout=max(self.left(deadline), 0.01))
        except subprocess.TimeoutExpired:
            code = None
        seconds = time.monotonic() - self.began
        if code is None or not self.eof:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            with self._changed:
                self._changed.wait_for(lambda: self.eof, timeout=5)
            return None, seconds
        return code, seconds


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:  # renamed or removed since the glob
        return -1


def run_to_end(script: Path, argv: tuple[str, ...], deadline: float) -> tuple[int | None, str]:
    job = Job(script, argv)
    code, _ = job.finish(deadline)
    return code, job.output


# ---- reading the output ------------------------------------------------------------------------
def final_error(output: str) -> str:
    """The last ``SomeError: text`` line (a traceback's last line), without a ``[rankN]:`` prefix."""
    for line in reversed(output.splitlines()):
        match = _ERROR_LINE.match(line.strip())
        if match:
            return match.group(1)
    return ""


def notes(output: str) -> list[str]:
    """The ``steadytrain: ...`` lines the trainer printed."""
    return [m.group(1) for line in output.splitlines() if (m := _NOTE.match(line.strip()))]


def headline(output: str, code: int | None) -> str:
    """What the table shows: the final error line, else the last note, else the last line."""
    if code not in (0, None) and (error := final_error(output)):
        return error
    said = notes(output)
    if said:
        return said[-1]
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _missing(says: tuple[str, ...], texts: list[str]) -> list[str]:
    return [s for s in says if not any(s in t for t in texts)]


# ---- the mount -----------------------------------------------------------------------------------
@contextlib.contextmanager
def mounted(spec: Mount | None, folder: Path) -> Iterator[str | None]:
    """Mount the case's tmpfs for the run; yields why it could not (then the case is skipped)."""
    if spec is None:
        yield None
        return
    target = folder / spec.path
    target.mkdir(parents=True, exist_ok=True)
    options = f"size={spec.size}" + (",ro" if spec.read_only and not spec.fill else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        yield f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}"
        return
    try:
        if spec.fill:
            _fill(target)
        if spec.read_only and spec.fill:
            subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        yield None
    finally:
        for attempt in range(50):
            if subprocess.run(["umount", str(target)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1 if attempt < 49 else 0)
        else:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)


def _fill(folder: Path) -> None:
    """Write zeros until the filesystem has no room left."""
    chunk = b"\0" * 4096
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, chunk):
                pass
    finally:
        os.close(fd)


# ---- checks a case can ask for -----------------------------------------------------------------------
def loads(pattern: str, at_least: int = 1) -> Check:
    """Every file matching ``pattern`` loads with ``torch.load(weights_only=True)`` as a checkpoint dict."""

    def check(folder: Path, output: str) -> str | None:
        import torch

        files = sorted(folder.glob(pattern))
        if len(files) < at_least:
            return f"LOSS: no checkpoint matches {pattern}"
        for path in files:
            try:
                state = torch.load(path, weights_only=True)
            except Exception as err:
                return f"LOSS: {path.relative_to(folder)} does not load: {type(err).__name__}: {err}"[:300]
            if not isinstance(state, dict) or "state_dict" not in state:
                return f"LOSS: {path.relative_to(folder)} holds no state_dict"
        return None

    return check


def csv_readable(pattern: str = "runs/**/metrics.csv") -> Check:
    """Every metrics.csv parses, and every row has as many fields as the header."""

    def check(folder: Path, output: str) -> str | None:
        for path in folder.glob(pattern):
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            if rows and any(len(row) != len(rows[0]) for row in rows[1:]):
                return f"LOSS: {path.relative_to(folder)} has a torn row"
        return None

    return check


def absent(name: str, why: str) -> Check:
    """Nothing named ``name`` (a glob) may exist after the run (e.g. the marker a pickle payload would write)."""

    def check(folder: Path, output: str) -> str | None:
        return f"SILENT: {why}" if list(folder.glob(name)) else None

    return check


def last_line(*texts: str) -> Check:
    """The job's last output line holds every one of ``texts``: the cause, without scrolling up."""

    def check(folder: Path, output: str) -> str | None:
        lines = [line for line in output.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else ""
        lacking = [text for text in texts if text not in last]
        return f"TRACEBACK: the last line {last[:200]!r} lacks {lacking}" if lacking else None

    return check


def left_behind(pattern: str) -> Check:
    """A temporary of a killed save must be there: proof that the kill landed mid-save."""

    def check(folder: Path, output: str) -> str | None:
        return None if list(folder.glob(pattern)) else f"MISSED: no {pattern} left, the kill landed outside the save"

    return check


# ---- one case, end to end -----------------------------------------------------------------------------
def run_case(case: Case, folder: Path) -> Outcome:
    """Write the script into ``folder``, run the case, and classify how it ended."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "train.py"
    script.write_text(case.source())
    with mounted(case.mount, folder) as cannot:
        if cannot:
            return Outcome(case.name, case.expect, "SKIP", 0.0, "", cannot)
        for argv in case.prepare:
            code, output = run_to_end(script, argv, case.deadline)
            if code != 0:
                return Outcome(
                    case.name, case.expect, "ERROR", 0.0, headline(output, code), "preparing run failed", output
                )
        job = Job(script, case.argv)
        missed = job.inject(case.signals, case.deadline)
        code, seconds = job.finish(case.deadline)
        output = job.output
        outcome = Outcome(case.name, case.expect, "", seconds, headline(output, code), output=output)
        outcome.got, outcome.detail = _classify(case, folder, code, output, missed)
    return outcome


def _classify(case: Case, folder: Path, code: int | None, output: str, missed: str | None) -> tuple[str, str]:
    if code is None:
        return "HANG", f"still running after {case.deadline:.0f}s; process group killed"
    leftovers = _leftovers(folder)
    if leftovers:
        return "HANG", f"exit {code}, but processes {leftovers} outlived the job"
    if missed is not None:
        return "MISSED", f"exit {code}: {missed}"
    for check in case.checks:
        found = check(folder, output)
        if found:
            got, _, why = found.partition(": ")
            return got, f"exit {code}: {why}"
    if case.resume is not None:
        resumed, resumed_output = run_to_end(folder / "train.py", case.resume, case.deadline)
        if resumed != 0 or "DONE" not in resumed_output:
            how = "hung" if resumed is None else f"ended with {resumed}"
            return "LOSS", f"exit {code}; the resume {how}: {headline(resumed_output, resumed)}"
    killed_by_us = code == -signal.SIGKILL and any(s.signum == signal.SIGKILL for s in case.signals)
    if code == 0 or killed_by_us:
        if case.expect != "OK":
            return "SILENT", f"exit {code}: the run went on as if nothing was wrong"
        absent_texts = _missing(case.says, output.splitlines())
        if absent_texts:
            return "SILENT", f"exit {code}, but the output never says {absent_texts}"
        return "OK", f"exit {code}"
    texts = [final_error(output), *notes(output)]
    absent_texts = _missing(case.says, texts)
    steps = sum(line.startswith("STEP=") for line in output.splitlines())
    late = f" after {steps} training steps" if steps and not case.signals else ""  # a late refusal costs work
    if absent_texts or not any(texts):
        return "TRACEBACK", f"exit {code}{late}; the final message lacks {absent_texts or case.says}"
    return "CLEAR", f"exit {code}{late}"


def _leftovers(folder: Path, within: float = 2.0) -> list[int]:
    deadline = time.monotonic() + within
    while (pids := processes_running(str(folder / "train.py"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids
