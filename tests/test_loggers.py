"""Loggers against their real backends: CSV files, wandb in offline mode, TensorBoard event files."""

from __future__ import annotations

import csv
import glob
import importlib
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from trainer.callbacks import ModelCheckpoint
from trainer.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger

REPO = Path(__file__).resolve().parents[1]
CSV_MODULE = importlib.import_module("trainer.loggers.csv")
WANDB_MODULE = importlib.import_module("trainer.loggers.wandb")
WANDB_IMPORT = importlib.import_module("trainer.loggers.wandb_media")
TB_MODULE = importlib.import_module("trainer.loggers.tensorboard")


def _read_csv(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    return list(reader.fieldnames or []), rows


class _Recorder:
    """Passes calls on to ``func`` and keeps their arguments."""

    def __init__(self, func: Any) -> None:
        self.func = func
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.func(*args, **kwargs)


# --------------------------------------------------------------------------------------------- imports


def test_import_loads_no_backend() -> None:
    code = (
        "import sys, trainer.loggers as L\n"
        "L.WandbLogger(project='p'); L.TensorBoardLogger(); L.CSVLogger()\n"
        "import importlib.util; importlib.util.find_spec('mlflow') and L.MLFlowLogger()\n"
        "loaded = {'wandb', 'tensorboard', 'torch.utils.tensorboard', 'mlflow'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize(("logger", "extra"), [(WandbLogger, "wandb"), (TensorBoardLogger, "tensorboard")])
def test_missing_backend_says_what_to_install(
    logger: type[Any], extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning_utilities.core.imports as imports

    monkeypatch.setattr(imports, "RequirementCache", lambda name: False)
    WANDB_IMPORT.check_wandb.cache_clear()  # a success earlier in this process is cached
    TB_MODULE._backend.cache_clear()
    with pytest.raises(ImportError, match=rf"pip install steadytrain\[{extra}\]"):
        logger(save_dir=str(tmp_path)).log_metrics({"loss": 1.0}, step=0)


def test_flush_with_nothing_logged_writes_nothing(tmp_path: Path) -> None:
    Logger().flush()  # the base class's default: nothing buffered, nothing to do
    for logger in (CSVLogger(save_dir=str(tmp_path)), TensorBoardLogger(save_dir=str(tmp_path)), WandbLogger()):
        logger.flush()
        logger.finalize("success")
    assert not any(tmp_path.iterdir())
    assert WANDB_MODULE.WandbLogger()._run is None


def test_rows_buffered_at_a_normal_exit_are_written(wandb_offline: Path) -> None:
    """A script that never calls flush or finalize still gets every row, from each logger."""
    code = (
        "import sys, torch\n"
        "from trainer.loggers import CSVLogger, TensorBoardLogger, WandbLogger\n"
        "root = sys.argv[1]\n"
        "for logger in (CSVLogger(root, 'csv'), TensorBoardLogger(root, 'tb'), WandbLogger(save_dir=root)):\n"
        "    logger.log_metrics({'loss': 0.5}, step=7)\n"
        "    logger.log_histogram('w', torch.arange(10.0), step=7)\n"
    )
    root = wandb_offline / "exit"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code, str(root)], cwd=REPO, check=True, env=env)

    assert _read_csv(str(root / "csv" / "version_0" / "metrics.csv"))[1] == [{"step": "7", "loss": "0.5"}]
    events = _events(str(root / "tb" / "version_0"))
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(7, 0.5)]
    assert events.Histograms("w")[0].step == 7
    (run_dir,) = glob.glob(str(root / "wandb" / "offline-run-*"))
    (row,) = _read_offline_run(run_dir)["history"]
    assert (row["trainer/global_step"], row["loss"], row["w._type"]) == (7, 0.5, "histogram")


# ------------------------------------------------------------------------------------------------- CSV


def test_csv_constructing_is_free_and_version_is_next_free(tmp_path: Path) -> None:
    for taken in ("version_0", "version_3", "version_x"):
        (tmp_path / "exp" / taken).mkdir(parents=True)
    logger = CSVLogger(save_dir=str(tmp_path / "new"), name="exp")
    assert not (tmp_path / "new").exists()
    logger = CSVLogger(save_dir=str(tmp_path), name="exp")
    assert logger.log_dir == str(tmp_path / "exp" / "version_4")
    assert os.listdir(logger.log_dir) == []  # claimed when chosen, so a run started beside it takes version_5
    assert CSVLogger(save_dir=str(tmp_path), name="exp").log_dir == str(tmp_path / "exp" / "version_5")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    assert os.path.exists(os.path.join(logger.log_dir, "metrics.csv"))
    assert CSVLogger(save_dir=str(tmp_path), name="exp", version="custom").log_dir.endswith("exp/custom")


def test_csv_buffers_rows_and_grows_the_header(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=str(tmp_path), flush_logs_every_n_steps=2)
    path = os.path.join(logger.log_dir, "metrics.csv")
    logger.log_metrics({"loss": 1.0}, step=0)
    assert not os.path.exists(path)
    logger.log_metrics({"loss": 0.5}, step=1)
    assert _read_csv(path) == (["loss", "step"], [{"step": "0", "loss": "1.0"}, {"step": "1", "loss": "0.5"}])
    logger.log_metrics({"loss": 0.25, "val_acc": torch.tensor(0.75)}, step=2)  # type: ignore[dict-item]
    logger.log_metrics({"lr": 0.1}, step=3)
    logger.log_metrics({"loss": 0.125}, step=4)
    logger.finalize("success")
    header, rows = _read_csv(path)
    assert header == ["loss", "lr", "step", "val_acc"]  # sorted, as Lightning's CSV writer keeps them
    assert [r["step"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert rows[0] == {"step": "0", "loss": "1.0", "val_acc": "", "lr": ""}
    assert rows[2] == {"step": "2", "loss": "0.25", "val_acc": "0.75", "lr": ""}
    assert rows[3]["lr"] == "0.1"
    assert not os.path.exists(path + ".tmp")


def test_csv_flush_appends_through_one_open_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flushed at every logging point (as the Trainer does), the file is opened once for appends and
    rewritten only when a column is new; every flush leaves all rows on disk."""
    opened, replaced = _Recorder(open), _Recorder(os.replace)
    monkeypatch.setattr(CSV_MODULE, "open", opened, raising=False)  # the module's lookup of the builtin
    monkeypatch.setattr(CSV_MODULE.os, "replace", replaced)
    appends = lambda: sum(args[1:2] == ("a",) for args, _ in opened.calls)  # noqa: E731
    rewrites = lambda: [args[1] for args, _ in replaced.calls]  # noqa: E731
    logger = CSVLogger(save_dir=str(tmp_path))
    path = os.path.join(logger.log_dir, "metrics.csv")
    for step in range(20):
        logger.log_metrics({"loss": float(step)}, step=step)
        logger.flush()
        assert len(_read_csv(path)[1]) == step + 1
    assert (appends(), rewrites()) == (1, [path])  # created once (with the header), then one append handle
    logger.log_metrics({"val_loss": 1.0}, step=20)  # a new column: one rewrite, then a new append handle
    logger.flush()
    for step in range(21, 40):
        logger.log_metrics({"loss": float(step)}, step=step)
        logger.flush()
    logger.flush()  # nothing buffered: no write
    logger.finalize("success")
    assert (appends(), rewrites()) == (2, [path, path])
    header, rows = _read_csv(path)
    assert header == ["loss", "step", "val_loss"]  # sorted, as Lightning's
    assert [r["step"] for r in rows] == [str(s) for s in range(40)]
    assert rows[20] == {"step": "20", "loss": "", "val_loss": "1.0"} and rows[39]["val_loss"] == ""


def test_csv_hparams_yaml(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=str(tmp_path))
    params = {
        "lr": 0.1,
        "model": {"depth": 4, "act": torch.nn.ReLU},
        "device": torch.device("cpu"),
        "ids": (1, 2),
    }
    logger.log_hyperparams(params)
    logger.log_metrics({"loss": 1.0}, step=0)  # hyper-parameters are written with the first metrics
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as f:
        loaded = yaml.safe_load(f)
    assert loaded == {
        "lr": 0.1,
        "model": {"depth": 4, "act": str(torch.nn.ReLU)},
        "device": "cpu",
        "ids": [1, 2],
    }


def test_csv_resume_appends_to_the_same_folder(tmp_path: Path) -> None:
    first = CSVLogger(save_dir=str(tmp_path), flush_logs_every_n_steps=1)
    for step in range(3):
        first.log_metrics({"loss": float(step)}, step=step)
    state = first.state_dict()
    first.log_metrics({"loss": 99.0, "stale": 1.0}, step=3)  # logged after the checkpoint, then a crash
    CSVLogger(save_dir=str(tmp_path)).log_metrics({"other": 1.0}, step=0)  # another run takes version_1

    resumed = CSVLogger(save_dir=str(tmp_path))
    resumed.load_state_dict(state)
    assert resumed.log_dir == first.log_dir
    resumed.log_metrics({"loss": 3.0, "val_acc": 0.5}, step=3)
    resumed.log_metrics({"loss": 4.0}, step=4)
    resumed.finalize("success")

    header, rows = _read_csv(os.path.join(first.log_dir, "metrics.csv"))
    assert [(r["step"], r["loss"]) for r in rows] == [(str(s), f"{float(s)}") for s in range(5)]
    assert "val_acc" in header
    assert rows[3]["val_acc"] == "0.5"

    again = CSVLogger(save_dir=str(tmp_path))  # resuming a finished run keeps every row
    again.load_state_dict(resumed.state_dict())
    assert again.state_dict() == {"version": 0, "rows": 5}  # a checkpoint before any new row
    again.log_metrics({"loss": 5.0}, step=5)
    again.finalize("success")
    assert len(_read_csv(os.path.join(first.log_dir, "metrics.csv"))[1]) == 6


# ----------------------------------------------------------------------------------------------- wandb

_BLOCK, _HEADER = 32768, 7


def _wandb_records(path: str) -> Iterator[Any]:
    """Parse a ``.wandb`` transaction log: LevelDB-style 32 KiB blocks of (crc, length, type) chunks.

    wandb 0.31 dropped the Python reader (``wandb.sdk.internal.datastore``); the format is unchanged.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, chunk = _HEADER, b""
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # too small for a header: zero padding to the next block
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        chunk += data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()  # type: ignore[attr-defined]  # re-exported per protobuf version
            record.ParseFromString(chunk)
            chunk = b""
            yield record


def _unflatten(items: Any) -> dict[str, Any]:
    """History or config items as a dict; nested key ``("img", "type")`` becomes ``"img.type"``."""
    return {".".join(item.nested_key) or item.key: json.loads(item.value_json) for item in items}


def _read_offline_run(run_dir: str) -> dict[str, Any]:
    import wandb

    # finish() returns before wandb's service has written the run's records (it only informs the
    # service); teardown waits for the service to close every stream, so the log is complete.
    wandb.teardown()
    (log,) = glob.glob(os.path.join(run_dir, "*.wandb"))
    out: dict[str, Any] = {"history": [], "config": {}, "files": [], "artifacts": [], "metrics": [], "run": None}
    for record in _wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            out["history"].append(_unflatten(record.history.item))
        elif kind == "config":
            out["config"].update(_unflatten(record.config.update))
        elif kind == "files":
            out["files"] += [f.path for f in record.files.files]
        elif kind == "artifact":
            out["artifacts"].append(record.artifact)
        elif kind == "run":
            out["run"] = record.run
        elif kind == "metric":
            out["metrics"].append((record.metric.glob_name or record.metric.name, record.metric.step_metric))
    return out


def _record_logs(logger: WandbLogger, monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    """Count the started run's ``log`` calls (offline, the run is real)."""
    run = logger.experiment
    recorder = _Recorder(run.log)
    monkeypatch.setattr(run, "log", recorder)
    return recorder


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Real wandb, offline, writing only under ``tmp_path``, with telemetry, git and console capture off."""
    wandb = pytest.importorskip("wandb")
    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_X_DISABLE_STATS": "true",
        "WANDB_X_DISABLE_META": "true",
        "WANDB_X_DISABLE_MACHINE_INFO": "true",
    }
    for name in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR", "ARTIFACT_DIR"):
        env[f"WANDB_{name}"] = str(tmp_path / "wandb_home" / name.lower())
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield tmp_path
    wandb.teardown()  # wandb caches settings (and our env) in a process-wide singleton


def test_wandb_offline_run_files(wandb_offline: Path) -> None:
    logger = WandbLogger(project="steadytrain-test", save_dir=str(wandb_offline), log_model=True, config={"seed": 7})
    logger.log_hyperparams({"lr": 0.1, "model": {"depth": 4}, "device": torch.device("cpu")})
    for step in (0, 10, 20):
        logger.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    image = torch.rand(3, 16, 12)  # CHW float: wandb alone would need torchvision for tensors
    mask = torch.zeros(16, 12, dtype=torch.long)
    mask[4:8, 2:6] = 2
    logger.log_image("samples", [image], step=20, masks=[{"predictions": mask, "ground_truth": mask}],
                     caption=["first"], class_labels={0: "bg", 2: "cat"})  # fmt: skip
    logger.log_histogram("weights", torch.tensor([0.0, 1.0, 2.0, float("nan"), float("-inf")]), step=20)
    logger.log_histogram("diverged", torch.tensor([float("nan"), float("inf")]), step=20)  # nothing to draw
    checkpoints = Path(logger.log_dir) / "checkpoints"
    checkpoints.mkdir(parents=True)
    callback = ModelCheckpoint(dirpath=str(checkpoints), monitor="loss")
    for name, score in (("epoch=0.ckpt", 0.5), ("epoch=1.ckpt", 0.25)):  # the kept (best) one replaces the first
        (checkpoints / name).write_bytes(b"weights")
        callback.best_k_models, callback.best_model_path = {str(checkpoints / name): score}, str(checkpoints / name)
        callback.last_model_path = str(checkpoints / "last.ckpt")
        (checkpoints / "last.ckpt").write_bytes(b"weights")
        logger.after_save_checkpoint(callback)  # log_model=True: remembered, uploaded when the run succeeds
    logger.finalize("success")

    (run_dir,) = glob.glob(str(wandb_offline / "wandb" / f"offline-run-*-{logger.id}"))
    run = _read_offline_run(run_dir)
    assert run["run"].run_id == logger.id and run["run"].project == "steadytrain-test"
    assert run["config"]["lr"] == 0.1 and run["config"]["seed"] == 7
    assert run["config"]["model"] == {"depth": 4} and run["config"]["device"] == "cpu"
    scalars = [(row["trainer/global_step"], row["loss"]) for row in run["history"] if "loss" in row]
    assert scalars == [(0, 1.0), (10, 1 / 11), (20, 1 / 21)]

    (images,) = [row for row in run["history"] if "samples._type" in row]
    assert images["trainer/global_step"] == 20 and images["samples.captions"] == ["first"]
    assert (images["samples.width"], images["samples.height"]) == (12, 16)
    assert set(images["samples.all_masks"][0]) == {"predictions", "ground_truth"}
    (png,) = images["samples.filenames"]
    assert png in run["files"] and (Path(run_dir) / "files" / png).stat().st_size > 0
    assert glob.glob(os.path.join(run_dir, "files", "media", "images", "mask", "*.mask.png"))

    (hist,) = [row for row in run["history"] if "weights._type" in row]
    assert hist["weights._type"] == "histogram" and sum(hist["weights.values"]) == 3  # NaN and inf dropped
    assert not any("diverged._type" in row for row in run["history"])

    artifacts = run["artifacts"]  # the kept checkpoints at the end: the best and last.ckpt, one version each
    assert [(a.name, a.type) for a in artifacts] == [(f"model-{logger.id}", "model")] * 2
    assert all([entry.path for entry in a.manifest.contents] == ["model.ckpt"] for a in artifacts)
    metadata = sorted((json.loads(a.metadata)["original_filename"], json.loads(a.metadata)["score"]) for a in artifacts)
    assert metadata == [("epoch=1.ckpt", 0.25), ("last.ckpt", None)]


def test_wandb_resume_continues_the_same_run(wandb_offline: Path) -> None:
    first = WandbLogger(project="steadytrain-test", save_dir=str(wandb_offline))
    first.log_metrics({"loss": 1.0}, step=5)
    state = first.state_dict()
    first.finalize("failed")

    resumed = WandbLogger(project="steadytrain-test", save_dir=str(wandb_offline))
    assert resumed.id != state["id"]
    resumed.load_state_dict(state)
    resumed.log_hyperparams({"lr": 0.2})  # the run starts later, with the checkpointed id
    assert resumed.experiment.id == state["id"]
    assert resumed.log_dir == first.log_dir
    resumed.log_metrics({"loss": 0.5}, step=3)  # earlier than the crashed run got: kept, not dropped
    resumed.log_histogram("w", torch.arange(4.0), step=3)
    resumed.finalize("success")

    # Offline, a resume is a second folder with the same id (``-1`` appended within the same second);
    # `wandb sync` uploads both into one run, in order.
    run_dirs = sorted(glob.glob(str(wandb_offline / "wandb" / f"offline-run-*-{state['id']}*")), key=os.path.getmtime)
    assert len(run_dirs) == 2
    resumed_run = _read_offline_run(run_dirs[1])
    (row,) = resumed_run["history"]  # the step's metrics and histogram: one row
    assert (row["trainer/global_step"], row["loss"], row["w._type"]) == (3, 0.5, "histogram")
    assert row["_step"] == 0  # wandb's own step restarted: only trainer/global_step places the row
    assert ("*", "trainer/global_step") in resumed_run["metrics"]


def test_wandb_checks_the_import_once_and_sends_one_row_per_step(
    wandb_offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning_utilities.core.imports as imports

    checks = _Recorder(imports.RequirementCache)
    monkeypatch.setattr(imports, "RequirementCache", checks)
    WANDB_IMPORT.check_wandb.cache_clear()
    logger = WandbLogger(project="steadytrain-test", save_dir=str(wandb_offline))
    logs = _record_logs(logger, monkeypatch)
    for step in (0, 10, 20):
        logger.log_metrics({"loss": 1.0, "lr": torch.tensor(0.1)}, step=step)  # type: ignore[dict-item]
        for i in range(20):
            logger.log_histogram(f"weights/{i}", torch.randn(50), step=step)
        logger.log_image("samples", [torch.rand(3, 8, 8)], step=step)
    logger.finalize("success")

    assert checks.calls == [(("wandb",), {})]
    assert len(logs.calls) == 3 and all(kwargs == {} for _, kwargs in logs.calls)  # no step=: see the docstring
    history = _read_offline_run(glob.glob(str(wandb_offline / "wandb" / f"offline-run-*-{logger.id}"))[0])["history"]
    assert [row["trainer/global_step"] for row in history] == [0, 10, 20]
    for row in history:
        assert {"loss", "lr", "weights/19._type", "samples._type"} <= set(row) and row["lr"] == pytest.approx(0.1)


def test_wandb_flush_semantics(wandb_offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wandb

    logger = WandbLogger(project="steadytrain-test", save_dir=str(wandb_offline))
    logs = _record_logs(logger, monkeypatch)
    sent = lambda: [(args[0]["trainer/global_step"], sorted(args[0])) for args, _ in logs.calls]  # noqa: E731

    logger.log_metrics({"loss": 1.0}, step=0)
    assert sent() == []  # buffered until the step's row is complete
    logger.flush()
    logger.flush()  # nothing buffered: no call
    assert sent() == [(0, ["loss", "trainer/global_step"])]
    logger.log_metrics({"loss": 2.0}, step=1)
    weights = torch.randn(1000)
    logger.log_histogram("w", weights, step=1)
    logger.log_metrics({"loss": 0.5}, step=1)  # the same key again at the same step: the later value
    assert len(sent()) == 1
    logger.log_metrics({"loss": 3.0}, step=2)  # another step sends the previous one
    assert sent()[1] == (1, ["loss", "trainer/global_step", "w"])
    values: Any = weights.numpy()  # wandb's hint says Sequence; it bins arrays
    histogram, reference = logs.calls[1][0][0]["w"], wandb.Histogram(values)  # binned as wandb.Histogram bins
    assert (histogram.histogram, histogram.bins) == (reference.histogram, reference.bins)
    logger.state_dict()  # a checkpoint sends what it covers
    assert [step for step, _ in sent()] == [0, 1, 2]
    logger.log_metrics({"loss": 4.0}, step=3)
    logger.log_metrics({"val_loss": 4.0}, step=2)  # an earlier step (as after a resume) sends too
    logger.finalize("success")  # and the last row is not lost
    assert [step for step, _ in sent()] == [0, 1, 2, 3, 2]

    history = _read_offline_run(glob.glob(str(wandb_offline / "wandb" / f"offline-run-*-{logger.id}"))[0])["history"]
    assert [(row["trainer/global_step"], row.get("loss", row.get("val_loss"))) for row in history] == [
        (0, 1.0),
        (1, 0.5),
        (2, 3.0),
        (3, 4.0),
        (2, 4.0),
    ]


# ----------------------------------------------------------------------------------------- TensorBoard


def _events(log_dir: str) -> Any:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    accumulator = event_accumulator.EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_tensorboard_event_file(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(save_dir=str(tmp_path))
    logger.log_hyperparams({"lr": 0.1, "device": torch.device("cpu")})
    for step in range(3):
        logger.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    logger.log_image("rgb", [torch.rand(3, 8, 8)], step=2)
    logger.log_image("gray", [torch.rand(1, 8, 8), (torch.rand(8, 8) * 255).to(torch.uint8).numpy()], step=2)
    logger.log_histogram("weights", torch.randn(100), step=2)
    logger.finalize("success")

    assert logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")
    (event_file,) = glob.glob(os.path.join(logger.log_dir, "events.out.tfevents.*"))
    loader = pytest.importorskip("tensorboard.backend.event_processing.event_file_loader")
    step_2 = [e for e in loader.EventFileLoader(event_file).Load() if e.step == 2 and e.HasField("summary")]
    assert len(step_2) == 1  # everything logged at a step is one event
    assert {v.tag for v in step_2[0].summary.value} == {"loss", "rgb", "gray/0", "gray/1", "weights"}
    events = _events(logger.log_dir)
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("loss")] == [
        (0, 1.0),
        (1, 0.5),
        (2, 0.333333),
    ]
    assert {"rgb", "gray/0", "gray/1"} <= set(events.Tags()["images"])
    assert events.Histograms("weights")[0].step == 2
    assert [(e.step, e.value) for e in events.Scalars("hp_metric")] == [(0, -1.0)]  # Lightning's HPARAMS tab
    hparams = [e for e in loader.EventFileLoader(event_file).Load() for v in e.summary.value if v.tag.startswith("_hp")]
    assert len(hparams) == 3 and b"device" in hparams[0].summary.value[0].metadata.plugin_data.content
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as f:
        assert yaml.safe_load(f) == {"lr": 0.1, "device": "cpu"}


def test_tensorboard_resume_purges_the_crashed_tail(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    first = TensorBoardLogger(save_dir=str(tmp_path))
    for step in range(3):
        first.log_metrics({"loss": float(step)}, step=step)
    state = first.state_dict()
    first.log_metrics({"loss": 99.0}, step=3)  # after the checkpoint, then a crash
    first.finalize("failed")

    resumed = TensorBoardLogger(save_dir=str(tmp_path))
    resumed.load_state_dict(state)
    resumed.log_metrics({"loss": 3.0}, step=3)
    resumed.finalize("success")
    assert resumed.log_dir == first.log_dir
    assert [(e.step, e.value) for e in _events(first.log_dir).Scalars("loss")] == [(s, float(s)) for s in range(4)]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the writer thread's own
def test_tensorboard_full_disk_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's thread re-raises its error on every call: the first names the run folder and the free
    space, and ``finalize`` (run while the job unwinds) does not fail on it again."""
    pytest.importorskip("tensorboard")
    record_writer = pytest.importorskip("tensorboard.summary.writer.record_writer")
    logger = TensorBoardLogger(save_dir=str(tmp_path))
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.flush()  # the writer is open now; every later write fails as on a full disk

    def full(self: Any, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(record_writer.RecordWriter, "write", full)
    logger.log_metrics({"loss": 2.0}, step=1)
    with pytest.raises(OSError, match="No space left on device") as raised:
        logger.state_dict()  # a checkpoint forces the event to disk
    assert logger.log_dir in str(raised.value) and "MiB free there" in str(raised.value)
    logger.log_metrics({"loss": 3.0}, step=2)
    logger.finalize("failed")  # nothing raised: the error was reported once
