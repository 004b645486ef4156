"""Records what a tests/lightning_style script reports, under Lightning or steadytrain (tests/lightning_parity.py).

Python imports this file at start-up when its folder is on PYTHONPATH; it does nothing unless
``PARITY_FRAMEWORK`` is set. Then it records, without a change to the script: each line the script
prints (``print`` called from the script, ``self.print`` included), and after every
``fit``/``validate``/``test``/``predict`` the call's return value and the Trainer's public values.
At exit, rank zero writes them as JSON to ``PARITY_OUT``, with the run folder's files and the rows
of each ``metrics.csv``. With ``PARITY_SHUFFLE=off`` every ``DataLoader`` is built with
``shuffle=False`` (on every rank: each imports this file), and Lightning's DDP neither shuffles nor
re-seeds (two documented differences).

Both frameworks' default logger is TensorBoard where tensorboard is installed, else CSV. Here it is
``CSVLogger`` on both sides, so both runs write a ``metrics.csv`` to compare; with
``PARITY_DEFAULT_LOGGER=native`` each keeps its own rule, and the scalars of each TensorBoard event file are
recorded instead (a script that draws with ``self.logger.experiment`` needs TensorBoard).
"""

from __future__ import annotations

import atexit
import builtins
import csv
import functools
import json
import os
import sys
from typing import Any

_FRAMEWORK = os.environ.get("PARITY_FRAMEWORK")
_SCRIPT = os.path.realpath(os.environ.get("PARITY_SCRIPT", ""))
_CALLS: list[dict[str, Any]] = []
_PRINTED: list[str] = []
_CWD = os.getcwd()
# Trainer and ModelCheckpoint values whose type the harness compares (the values are compared too).
TRAINER_ATTRS = ("log_dir", "default_root_dir", "ckpt_path", "global_step", "current_epoch", "world_size")
CHECKPOINT_ATTRS = ("best_model_path", "last_model_path", "kth_best_model_path", "best_model_score", "dirpath")


def _plain(value: Any) -> Any:
    """JSON-able form: tensors as numbers or nested lists, paths as text relative to the run's folder."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().tolist()
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | os.PathLike):
        return _relative(os.fspath(value))
    if value is None or isinstance(value, bool | int | float):
        return value
    return repr(value)


def _relative(text: str) -> str:
    return text.replace(_CWD + os.sep, "").replace(_CWD, ".")


def _typed(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for name in names:
        value = getattr(obj, name, None)
        out[name] = {"type": type(value).__name__, "value": _plain(value)}
    return out


def _snapshot(trainer: Any, call: str, result: Any) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "call": call,
        "result": _plain(result),
        "trainer": _typed(trainer, TRAINER_ATTRS),
        "logger.log_dir": _plain(getattr(trainer.logger, "log_dir", None)),
    }
    for name in ("callback_metrics", "logged_metrics", "progress_bar_metrics"):
        values = getattr(trainer, name)
        snap[name] = _plain(dict(values))
        snap[f"{name} value types"] = sorted({type(v).__name__ for v in values.values()})
    callback = trainer.checkpoint_callback
    if callback is not None:
        snap["checkpoint"] = _typed(callback, CHECKPOINT_ATTRS)
        snap["checkpoint"]["best_k_models"] = _plain(dict(callback.best_k_models))
    return snap


def _wrap(cls: Any, call: str) -> None:
    original = getattr(cls, call)

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _inside_tuner(sys._getframe(1)):
            return result  # a Tuner's own runs end in states the user never sees (each side restores its own way)
        snap = _snapshot(self, call, result)  # on every rank: Lightning's log_dir is a collective (broadcast)
        if self.is_global_zero:
            _CALLS.append(snap)
        return result

    setattr(cls, call, recorded)


def _inside_tuner(frame: Any) -> bool:
    """Whether this call comes from a Tuner (``lightning/pytorch/tuner/`` or ``trainer/tuner/``)."""
    while frame is not None:
        if f"{os.sep}tuner{os.sep}" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _recording_print(*args: Any, **kwargs: Any) -> None:
    caller = sys._getframe(1)
    if caller.f_code.co_name == "print" and caller.f_back is not None:  # self.print, called from the script
        caller = caller.f_back
    if os.path.realpath(caller.f_code.co_filename) == _SCRIPT and kwargs.get("file") in (None, sys.stdout):
        _PRINTED.append(_relative(kwargs.get("sep", " ").join(str(a) for a in args)))
    _print(*args, **kwargs)


def _files() -> dict[str, Any]:
    """Every file the run wrote, by path; a ``metrics.csv`` with its header and rows."""
    files: dict[str, Any] = {}
    for root, _, names in os.walk(_CWD):
        events = sorted((n for n in names if n.startswith("events.out.tfevents.")), key=_event_file_order)
        for i, name in enumerate(events):  # each stage that logs opens one: fit's, then test's, ...
            files[os.path.join(_relative(root), f"events.out.tfevents#{i}")] = _events(os.path.join(root, name))
        for name in names:
            path = os.path.join(root, name)
            rel = _relative(path)
            if name.startswith("events.out.tfevents."):
                continue
            if name == "metrics.csv":
                with open(path, newline="") as f:
                    reader = csv.reader(f)
                    header, *rows = list(reader)
                files[rel] = {"header": header, "rows": [[float(v) if v else None for v in row] for row in rows]}
            else:
                files[rel] = None
    return files


def _event_file_order(name: str) -> tuple[int, int]:
    """``events.out.tfevents.<time>.<host>.<pid>.<n>``: in the order they were opened."""
    parts = name.split(".")
    return int(parts[3]), int(parts[-1])


def _events(path: str) -> list[list[Any]]:
    """A TensorBoard event file as ``[tag, step, value]`` rows (a scalar's value; what kind of summary
    otherwise), as TensorBoard shows them: by tag and step (the order of values within a step is not seen),
    repeats in file order; the file's name holds the time and host, so it is not compared."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    rows: list[list[Any]] = []
    for event in EventFileLoader(path).Load():
        for value in event.summary.value:
            kind = value.metadata.plugin_data.plugin_name or value.WhichOneof("value")
            scalar = value.tensor.float_val[0] if kind == "scalars" and value.tensor.float_val else None
            rows.append([value.tag, event.step, scalar if scalar is not None else kind])
    return sorted(rows, key=lambda row: (row[0], row[1]))


def _write() -> None:
    if os.environ.get("RANK", "0") != "0" or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    out = {"printed": _PRINTED, "calls": _CALLS, "files": _files()}
    with open(os.environ["PARITY_OUT"], "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


def _no_shuffle() -> None:
    from torch.utils.data import DataLoader

    init = DataLoader.__init__

    @functools.wraps(init)  # Lightning rebuilds a loader from the arguments its signature names
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) >= 3:
            args = (*args[:2], False, *args[3:])
        else:
            kwargs["shuffle"] = False
        init(self, *args, **kwargs)

    DataLoader.__init__ = __init__  # type: ignore[method-assign]


def _lightning_ddp_no_shuffle() -> None:
    """Lightning gives a DDP training loader ``DistributedSampler(shuffle=True)`` even when the script
    says ``shuffle=False`` (steadytrain keeps the script's order, docs/migration/from-lightning.md);
    with shuffling off, the Lightning run is held to the script's order so the rest can be compared."""
    from torch.utils.data import DistributedSampler

    init = DistributedSampler.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["shuffle"] = False
        init(self, *args, **kwargs)

    DistributedSampler.__init__ = __init__  # type: ignore[method-assign]


def _lightning_ddp_no_reseed() -> None:
    """Lightning's DDP and FSDP strategies seed every rank again from ``seed_everything``'s seed at each stage's
    start (``reset_seed``), its single device does not; steadytrain never re-seeds, so 2 ranks draw as 1 device
    does (docs/migration/from-lightning.md). With shuffling off, the Lightning run keeps its stream too."""
    import lightning.pytorch.strategies.ddp
    import lightning.pytorch.strategies.fsdp

    for strategy in (lightning.pytorch.strategies.ddp, lightning.pytorch.strategies.fsdp):
        strategy.reset_seed = lambda: None  # type: ignore[attr-defined]


def _destroy_lightning_group() -> None:
    """Lightning leaves the process group to the interpreter's teardown, where a gloo worker thread
    still holding work can abort the process ("terminate called without an active exception",
    pytorch/pytorch#190489) after the script has finished. steadytrain destroys its group at exit
    (trainer/strategies/parallel.py); the Lightning run gets the same, so a clean run exits 0."""
    import time

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        time.sleep(0.05)  # let gloo's worker threads drop their last work first, as steadytrain does
        dist.destroy_process_group()


def _install() -> None:
    global _print
    import torch

    torch.manual_seed(0)  # torch seeds its default generator at random: unseeded scripts start alike
    if os.environ.get("PARITY_SHUFFLE") == "off":
        _no_shuffle()
        if _FRAMEWORK == "lightning":
            _lightning_ddp_no_shuffle()
            _lightning_ddp_no_reseed()
    csv_default = os.environ.get("PARITY_DEFAULT_LOGGER", "csv") == "csv"
    if _FRAMEWORK == "lightning":
        from lightning.pytorch import Trainer
        from lightning.pytorch.trainer.connectors.logger_connector import logger_connector

        if csv_default:
            logger_connector._TENSORBOARD_AVAILABLE = logger_connector._TENSORBOARDX_AVAILABLE = False
        atexit.register(_destroy_lightning_group)  # registered before _write, so it runs after it
    else:
        import trainer.loggers.build
        from trainer import Trainer

        if csv_default:
            trainer.loggers.build.tensorboard_available = lambda: False
    for call in ("fit", "validate", "test", "predict"):
        _wrap(Trainer, call)
    _print = builtins.print
    builtins.print = _recording_print
    atexit.register(_write)


_print = builtins.print
if _FRAMEWORK and os.environ.get("PARITY_OUT"):
    _install()
