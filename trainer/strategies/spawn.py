"""``ddp_spawn`` / ``ddp_fork`` / ``ddp_notebook``: this process starts every rank and waits for them.

Lightning's launch modes for code that cannot be re-run as a script (a notebook, a function called from
other code). ``fork`` copies the running interpreter, so a Jupyter kernel's model and data go along;
``spawn`` starts fresh interpreters and pickles the Trainer, the module and the data into them. Each
rank runs the same fit/validate/test/predict as under ``strategy="ddp"`` (same math). Rank 0 writes
what the caller needs (the fitted weights, the stage's result, the metrics and the callbacks' state)
to a file; this process loads it, so the module and the Trainer here look as after a one-process run.

Failure rule: a rank that fails ends every rank within seconds; the error raised here names the rank
and its cause on the last line.
"""

from __future__ import annotations

import io
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.multiprocessing import ProcessRaisedException

from trainer import failures, launch, supervise
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

START_METHODS = ("popen", "spawn", "fork")
_RESULT_FILE = "rank0-result.pt"
_POLL_S = 0.05
_CAUSE_WAIT_S = 1.0  # after a rank failed: time for the rank that caused it to record its cause
SPAWN_MARK = "spawn"  # launch.SELF_LAUNCH_VAR in a rank this module started


class RankFailedError(ProcessRaisedException):
    """A rank of a ``ddp_spawn``/``ddp_fork`` job failed; the message ends with its cause. A
    ``torch.multiprocessing.ProcessRaisedException``, as Lightning's spawned ranks raise: code catching that works."""


class MultiprocessingLauncher:
    """Starts ``devices`` ranks with ``multiprocessing`` (``"spawn"`` or ``"fork"``) and waits for them."""

    def __init__(self, start_method: str) -> None:
        if start_method not in ("spawn", "fork"):
            raise MisconfigurationException(f"start_method={start_method!r}: choose 'spawn' or 'fork'.")
        self.start_method = start_method

    @property
    def is_interactive_compatible(self) -> bool:
        """Only forked ranks can run code defined in a notebook (spawned ones re-import ``__main__``)."""
        return self.start_method == "fork"

    def check_platform(self, strategy_name: str) -> None:
        """Refuse, when the Trainer is built, a start method this platform lacks."""
        if self.start_method not in multiprocessing.get_all_start_methods():
            raise MisconfigurationException(
                f"strategy={strategy_name!r} needs the {self.start_method!r} start method, but process forking is "
                "not supported on this platform; use strategy='ddp_spawn' instead."
            )

    def launch(
        self,
        trainer: TrainerView,
        function: Callable[..., Any],
        *args: Any,
        module: Module | None,
        datamodule: Any,
    ) -> Any:
        """Run ``function(*args)`` on every rank; return rank 0's result, with its weights and state loaded here."""
        strategy = trainer.strategy
        if strategy.num_nodes > 1:
            raise MisconfigurationException(
                f"strategy with start_method={self.start_method!r} starts processes on this machine only, but "
                f"num_nodes={strategy.num_nodes}; use strategy='ddp' with torchrun or srun on each node."
            )
        if self.start_method == "fork":
            check_cuda_not_initialized()
        folder = tempfile.mkdtemp(prefix="steadytrain-spawn-")
        try:
            processes = self._start(len(strategy.device_indices), folder, trainer, function, args)
            _wait(processes, folder)
            output = torch.load(Path(folder) / _RESULT_FILE, map_location="cpu", weights_only=False)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        _adopt(trainer, output, module, datamodule)
        return output["result"]

    def _start(
        self, nprocs: int, folder: str, trainer: TrainerView, function: Callable[..., Any], args: tuple[Any, ...]
    ) -> list[multiprocessing.process.BaseProcess]:
        context = multiprocessing.get_context(self.start_method)
        port = launch.find_free_port()
        job: Any = (trainer, function, args)
        if self.start_method == "spawn":
            job = _by_value(job)  # one copy per rank: never tensors in memory the ranks share
        processes = []
        for rank in range(nprocs):
            process = context.Process(  # type: ignore[attr-defined]
                target=_run_rank,
                args=(rank, nprocs, port, folder, job),
                name=f"steadytrain-rank{rank}",
            )
            process.start()
            processes.append(process)
        return processes


def check_cuda_not_initialized() -> None:
    """A forked child cannot use CUDA once its parent initialised it (the CUDA runtime does not survive fork)."""
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "strategy='ddp_fork'/'ddp_notebook' cannot fork new processes: CUDA is already initialised in this "
            "process (a tensor or a module was moved to the GPU, or torch.cuda was called, before fit). Restart the "
            "kernel and keep CUDA calls out of the notebook's cells before fit, or run the code as a script with "
            "strategy='ddp' (or 'ddp_spawn')."
        )


def _run_rank(
    rank: int,
    nprocs: int,
    port: int,
    folder: str,
    job: tuple[TrainerView, Callable[..., Any], tuple[Any, ...]] | bytes,
) -> None:
    """One rank: the launcher's variables, the stage, rank 0's result to a file; any failure recorded."""
    set_pdeathsig = supervise.die_with_parent()
    if set_pdeathsig is not None:
        set_pdeathsig()  # this rank ends if the launching process dies
    env = launch.ClusterEnv(rank, rank, nprocs, 0, nprocs, "127.0.0.1", port, "self")
    os.environ.update(launch.rank_environment(env, rank))
    os.environ[launch.SELF_LAUNCH_VAR] = SPAWN_MARK
    os.environ[failures.FAILURE_DIR_VAR] = folder
    try:
        trainer, function, args = pickle.loads(job) if isinstance(job, bytes) else job
        result = function(*args)
        if rank == 0:
            _write_result(trainer, result, Path(folder))
        trainer.strategy.barrier()  # no rank leaves the group while rank 0 still writes
        destroy = getattr(trainer.strategy, "destroy_process_group", None)
        if destroy is not None:
            destroy()
    except BaseException as exc:
        failures.record(rank, exc)
        lines = traceback.format_exc().splitlines()
        sys.stderr.write("".join(f"[rank{rank}]: {line}\n" for line in lines))
        sys.stderr.flush()
        os._exit(1)


def _write_result(trainer: TrainerView, result: Any, folder: Path) -> None:
    module = trainer.module
    output = {
        "fn": trainer.state.fn.value if trainer.state.fn is not None else None,
        "interrupted": trainer.state.status.value == "interrupted",
        "ckpt_path": trainer.state.ckpt_path,
        "weights": {k: v.detach().cpu() for k, v in module.state_dict().items()} if module is not None else None,
        "result": result,
        "metrics": trainer.metric_log.state_dict(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
    }
    tmp = folder / (_RESULT_FILE + ".tmp")
    torch.save(output, tmp)
    os.replace(tmp, folder / _RESULT_FILE)


def _wait(processes: list[multiprocessing.process.BaseProcess], folder: str) -> None:
    """Wait for every rank; the first that fails stops the others and raises here with its cause."""
    pending = {p.sentinel: rank for rank, p in enumerate(processes)}
    try:
        while pending:
            for sentinel in multiprocessing.connection.wait(list(pending), timeout=_POLL_S):
                rank = pending.pop(sentinel)  # type: ignore[arg-type]
                processes[rank].join()  # the sentinel closes just before the exit code is there to read
                code = processes[rank].exitcode
                if code:
                    raise _failure(processes, rank, code, folder)
    except BaseException:
        _kill(processes)
        raise


def _failure(processes: list[multiprocessing.process.BaseProcess], first: int, code: int, folder: str) -> Exception:
    """The rank that caused the failure: one that recorded a cause other than a lost peer, else the first."""
    deadline = time.monotonic() + _CAUSE_WAIT_S
    while time.monotonic() < deadline:
        causes = {r: failures.recorded(folder, r) for r in range(len(processes))}
        real = [r for r, cause in causes.items() if cause and not supervise.is_peer_failure_text(cause)]
        if real:
            first, code = real[0], processes[real[0]].exitcode or 1
            break
        if causes.get(first) is not None and all(p.exitcode is not None for p in processes):
            break
        time.sleep(_POLL_S)
    _kill(processes)
    cause = failures.recorded(folder, first) or supervise.describe_exit(first, code)
    message = f"{supervise.describe_exit(first, code)}; all ranks stopped.\nrank {first} failed: {cause}"
    return RankFailedError(message, first, processes[first].pid or 0)


def _kill(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """SIGKILL: a SIGTERM would ask a rank in fit to save a checkpoint first."""
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join()


def _adopt(trainer: TrainerView, output: dict[str, Any], module: Module | None, datamodule: Any) -> None:
    """This process's module and Trainer as the ranks left them: rank 0's weights, metrics and callback state."""
    module = module if module is not None else trainer.module
    if module is None or output["fn"] is None:
        return
    if output["weights"] is not None:
        module.load_state_dict(output["weights"])
    trainer.attach(module, datamodule, output["fn"])
    if output["ckpt_path"]:
        trainer.state.loaded(output["ckpt_path"])
    trainer.metric_log.load_state_dict(output["metrics"])
    for callback in trainer.callbacks:
        state = output["callbacks"].get(callback.state_key)
        if state is not None:
            callback.load_state_dict(state)
    trainer.release(interrupted=output["interrupted"])


_LOCKS = {type(threading.Lock()): threading.Lock, type(threading.RLock()): threading.RLock}


class _ByValue(pickle.Pickler):
    """Plain pickling (tensors by value, not torch's shared-memory handles: each rank must own its weights);
    a lock (a logger's, the metric log's) arrives as a new one."""

    def reducer_override(self, obj: Any) -> Any:
        new = _LOCKS.get(type(obj))
        return (new, ()) if new is not None else NotImplemented


def _by_value(job: Any) -> bytes:
    buffer = io.BytesIO()
    _ByValue(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(job)
    return buffer.getvalue()
