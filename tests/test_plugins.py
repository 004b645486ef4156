"""``Trainer(plugins=[...])`` and ``barebones=True``: what each plug-in does, and what is refused."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import trainer
import trainer.plugins
import trainer.strategies
from tests.models import Regressor, loader, quiet, regression_data
from trainer.exceptions import MisconfigurationException
from trainer.plugins import (
    AsyncCheckpointIO,
    CheckpointIO,
    DoublePrecision,
    MixedPrecision,
    SLURMEnvironment,
    TorchCheckpointIO,
    TorchElasticEnvironment,
    TorchSyncBatchNorm,
)
from trainer.plugins.environments import ClusterEnvironment, cluster_of
from trainer.plugins.io import PathLike
from trainer.plugins.layer_sync import CPUSyncBatchNorm


class RecordingIO(CheckpointIO):
    """Writes through TorchCheckpointIO and records the calls and the thread each ran on."""

    def __init__(self) -> None:
        self.inner = TorchCheckpointIO()
        self.calls: list[tuple[str, str, str]] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        self.calls.append(("save", Path(path).name, threading.current_thread().name))
        self.inner.save_checkpoint(checkpoint, path)

    def load_checkpoint(self, path: PathLike, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        self.calls.append(("load", Path(path).name, threading.current_thread().name))
        return self.inner.load_checkpoint(path, map_location)

    def remove_checkpoint(self, path: PathLike) -> None:
        self.inner.remove_checkpoint(path)


def fit_with(tmp_path: Path, plugins: Any, **kwargs: Any) -> tuple[trainer.Trainer, Regressor]:
    module = Regressor()
    t = quiet(tmp_path, max_epochs=2, plugins=plugins, enable_checkpointing=True, **kwargs)
    t.fit(module, loader(regression_data(32)))
    return t, module


def test_a_checkpoint_io_writes_and_reads_every_checkpoint(tmp_path: Path) -> None:
    io = RecordingIO()
    t, module = fit_with(tmp_path, [io])
    assert t.strategy.checkpoint_io is io
    saved = [name for kind, name, _ in io.calls if kind == "save"]
    assert saved and all(name.endswith(".ckpt") for name in saved)
    path = t.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    t.fit(module, loader(regression_data(32)), ckpt_path=path)
    assert ("load", Path(path).name) in [(k, n) for k, n, _ in io.calls]


def test_async_checkpoint_io_writes_in_the_background_and_the_file_holds_the_weights(tmp_path: Path) -> None:
    inner = RecordingIO()
    t, module = fit_with(tmp_path, [AsyncCheckpointIO(inner)])
    threads = {thread for kind, _, thread in inner.calls if kind == "save"}
    assert threads and all(name.startswith("steadytrain-async-save") for name in threads)
    path = t.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    state = torch.load(path, weights_only=False)["state_dict"]
    for name, value in module.state_dict().items():
        assert torch.equal(state[name], value), name  # written whole after fit returned (teardown waited)


def test_save_checkpoint_storage_options_reach_the_checkpoint_io(tmp_path: Path) -> None:
    """Lightning's ``trainer.save_checkpoint(path, storage_options=...)``: a CheckpointIO of the user's gets them; the
    default one and a sharded strategy (DCP writes its shards itself) refuse them with a TypeError naming them."""

    class OptionsIO(RecordingIO):
        def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
            self.calls.append(("options", repr(storage_options), ""))
            super().save_checkpoint(checkpoint, path)

    io = OptionsIO()
    t, _ = fit_with(tmp_path, [io])
    t.save_checkpoint(tmp_path / "x.ckpt", storage_options={"acl": "private"})
    assert ("options", "{'acl': 'private'}", "") in io.calls and (tmp_path / "x.ckpt").is_file()
    plain, _ = fit_with(tmp_path / "plain", None)
    with pytest.raises(TypeError, match="storage_options"):
        plain.save_checkpoint(tmp_path / "y.ckpt", storage_options={"acl": "private"})
    assert not (tmp_path / "y.ckpt").exists()
    with pytest.raises(TypeError, match=r"FSDPStrategy.*does not use the `CheckpointIO`.*acl"):
        trainer.strategies.FSDPStrategy().save_checkpoint({}, tmp_path / "z", storage_options={"acl": "private"})


def test_a_checkpoint_io_given_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match="multiple values for CheckpointIO"):
        quiet(tmp_path, plugins=[TorchCheckpointIO(), AsyncCheckpointIO()])


@pytest.mark.parametrize(
    ("environment", "signal"), [(SLURMEnvironment(auto_requeue=False), None), (SLURMEnvironment(), "SIGUSR1")]
)
def test_slurm_auto_requeue_decides_the_requeue_signal(tmp_path: Path, environment: Any, signal: Any) -> None:
    assert quiet(tmp_path, plugins=[environment]).requeue_signal == signal


def test_slurm_environment_reaches_a_ddp_strategy(tmp_path: Path) -> None:
    environment = SLURMEnvironment(auto_requeue=False)
    t = quiet(tmp_path, plugins=[environment], strategy="ddp", devices=2)
    assert t.strategy.cluster_environment is environment  # type: ignore[attr-defined]
    assert t.requeue_signal is None


def test_torch_sync_batchnorm_converts_batchnorm_under_ddp(tmp_path: Path) -> None:
    sync = TorchSyncBatchNorm()
    t = quiet(tmp_path, plugins=[sync], strategy="ddp", devices=2)
    assert t.strategy.layer_sync is sync  # type: ignore[attr-defined]
    converted = sync.apply(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    assert isinstance(converted[1], CPUSyncBatchNorm)  # torch's SyncBatchNorm needs CUDA; this one runs on gloo
    reverted = sync.revert(converted)[1]
    assert isinstance(reverted, nn.modules.batchnorm._BatchNorm) and not isinstance(reverted, CPUSyncBatchNorm)


def test_a_layer_sync_on_one_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match="TorchSyncBatchNorm"):
        quiet(tmp_path, plugins=[TorchSyncBatchNorm()])


def test_a_double_precision_plugin_trains_in_float64(tmp_path: Path) -> None:
    precision = DoublePrecision()
    t, module = fit_with(tmp_path, [precision])
    assert t.precision_plugin is precision
    assert t.precision == "64-true"
    assert all(p.dtype == torch.float64 for p in module.parameters())


def test_a_mixed_precision_plugin_is_the_trainers_precision(tmp_path: Path) -> None:
    precision = MixedPrecision("bf16-mixed", "cpu")
    assert quiet(tmp_path, plugins=[precision]).precision_plugin is precision


def test_a_precision_given_as_flag_and_plugin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match="Received both `precision=bf16-mixed`"):
        quiet(tmp_path, precision="bf16-mixed", plugins=[MixedPrecision("bf16-mixed", "cpu")])


@pytest.mark.parametrize("plugin", ["slurm", object()])
def test_an_unknown_plugin_is_refused(tmp_path: Path, plugin: Any) -> None:
    with pytest.raises(MisconfigurationException, match="plugin"):
        quiet(tmp_path, plugins=[plugin])


# ---- barebones ---------------------------------------------------------------------------------
def test_barebones_turns_off_what_costs_speed(tmp_path: Path) -> None:
    t = trainer.Trainer(barebones=True, accelerator="cpu", default_root_dir=tmp_path)
    assert t.barebones
    assert not t.loggers
    assert t.checkpoint_callback is None
    assert t.progress_bar_callback is None
    assert not any(isinstance(cb, trainer.ModelSummary) for cb in t.callbacks)
    assert t.num_sanity_val_steps == 0
    assert t.log_every_n_steps == 0  # Lightning's: no step is a logging step


def test_barebones_says_at_info_level_what_it_turned_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        trainer.Trainer(barebones=True, accelerator="cpu", default_root_dir=tmp_path)
    assert "running in `Trainer(barebones=True)` mode" in caplog.text  # Lightning's words, which a script may grep
    assert "Checkpointing: `Trainer(enable_checkpointing=True)`" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        trainer.Trainer(accelerator="cpu", default_root_dir=tmp_path)
    assert "barebones" not in caplog.text


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("enable_checkpointing", True),
        ("logger", True),
        ("enable_progress_bar", True),
        ("enable_model_summary", True),
        ("log_every_n_steps", 1),
        ("num_sanity_val_steps", 1),
        ("fast_dev_run", 1),
        ("detect_anomaly", True),
        ("profiler", "simple"),
        ("profiler", False),  # Lightning refuses any profiler but None
    ],
)
def test_barebones_refuses_what_it_turns_off_with_lightnings_text(tmp_path: Path, flag: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"`Trainer\(barebones=True, {flag}={value!r}\)` was passed"):
        trainer.Trainer(barebones=True, accelerator="cpu", default_root_dir=tmp_path, **{flag: value})


def test_barebones_warns_on_self_log(tmp_path: Path) -> None:
    t = trainer.Trainer(barebones=True, accelerator="cpu", max_epochs=1, default_root_dir=tmp_path)
    with pytest.warns(match=r"barebones=True\)` is configured"):
        t.fit(LoggingRegressor(), loader(regression_data(16)))
    assert "loss" not in t.callback_metrics


class LoggingRegressor(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss


class Rows(trainer.loggers.Logger):
    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append(dict(metrics))


def test_log_every_n_steps_zero_logs_epoch_values_only(tmp_path: Path) -> None:
    """barebones' value, which Lightning takes on its own too: no step is a logging step, epochs still log, and the
    callbacks that log at logging steps log nothing at steps (instead of dividing by zero)."""
    rows = Rows()
    callbacks = [trainer.callbacks.LearningRateMonitor(logging_interval="step"), trainer.callbacks.DeviceStatsMonitor()]
    fit = quiet(tmp_path, max_epochs=2, log_every_n_steps=0, logger=rows, callbacks=callbacks)
    fit.fit(LoggingRegressor(), loader(regression_data(16)))
    keys = {key for row in rows.rows for key in row}
    assert "loss_epoch" in keys
    assert not [k for k in keys if k == "loss_step" or k.startswith(("lr-", "DeviceStatsMonitor"))], keys


class MyCluster(ClusterEnvironment):
    """A cluster steadytrain does not know: rank 3 of 4 on node 1, rendezvous at 10.0.0.1:29999."""

    def __init__(self, world: int = 4) -> None:
        self.world = world

    creates_processes_externally = True  # type: ignore[assignment]
    main_address = "10.0.0.1"  # type: ignore[assignment]
    main_port = 29999  # type: ignore[assignment]

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self.world

    def set_world_size(self, size: int) -> None:
        self.world = size

    def global_rank(self) -> int:
        return 3

    def set_global_rank(self, rank: int) -> None:
        pass

    def local_rank(self) -> int:
        return 1

    def node_rank(self) -> int:
        return 1


def test_your_own_cluster_environment_places_the_rank() -> None:
    cluster = cluster_of(MyCluster(), num_devices=2, num_nodes=2)
    assert (cluster.rank, cluster.local_rank, cluster.world_size, cluster.node_rank) == (3, 1, 4, 1)
    assert (cluster.master_addr, cluster.master_port, cluster.source) == ("10.0.0.1", 29999, "MyCluster")


def test_torchrun_inside_a_slurm_allocation_is_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun sets TORCHELASTIC_RUN_ID for every rank; SLURM's variables are there too when it runs in a job."""
    for name, value in {"TORCHELASTIC_RUN_ID": "1", "SLURM_NTASKS": "2", "WORLD_SIZE": "2", "RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    t = trainer.Trainer(strategy="ddp", accelerator="cpu", devices=2, logger=False, enable_checkpointing=False)
    assert isinstance(t.strategy.cluster_environment, TorchElasticEnvironment)  # type: ignore[attr-defined]
    assert t.strategy.cluster_environment.global_rank() == 1  # type: ignore[attr-defined]


def test_a_cluster_environment_that_contradicts_devices_times_nodes_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"\(MyCluster\) started WORLD_SIZE=3 .* devices=2 x num_nodes=2 = 4"):
        cluster_of(MyCluster(world=3), num_devices=2, num_nodes=2)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: trainer.plugins.DeepSpeedPrecision(), "DeepSpeedPrecision.*fsdp"),
        (lambda: trainer.plugins.XLAPrecision(), "XLAPrecision.*TPU"),
        (lambda: trainer.plugins.BitsandbytesPrecision(), "BitsandbytesPrecision.*bf16-true"),
        (lambda: trainer.plugins.TransformerEnginePrecision(), "TransformerEnginePrecision.*bf16-mixed"),
        (lambda: trainer.plugins.XLACheckpointIO(), "XLACheckpointIO.*TorchCheckpointIO"),
        (lambda: trainer.strategies.DeepSpeedStrategy(), "DeepSpeedStrategy.*fsdp"),
        (lambda: trainer.strategies.XLAStrategy(), "XLAStrategy.*TPU"),
    ],
)
def test_unsupported_hardware_names_import_and_refuse_with_what_to_use(build: Any, says: str) -> None:
    with pytest.raises(MisconfigurationException, match=says):
        build()


def test_fork_after_cuda_was_initialised_says_so_and_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.strategies.spawn import check_cuda_not_initialized

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match=r"CUDA is already initialised.*ddp_spawn"):
        check_cuda_not_initialized()


def test_slurm_environment_reads_the_ranks_srun_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    monkeypatch.setenv("SLURM_NNODES", "2")
    cluster = cluster_of(SLURMEnvironment(), num_devices=2, num_nodes=2)
    assert (cluster.rank, cluster.local_rank, cluster.world_size, cluster.node_rank) == (3, 1, 4, 1)
    with pytest.raises(MisconfigurationException, match="devices=4 disagrees with SLURM_NTASKS_PER_NODE=2"):
        SLURMEnvironment().validate_settings(num_devices=4, num_nodes=2)


def test_torchelastic_environment_reads_the_ranks_torchrun_set(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    env["MASTER_PORT"] = "29500"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert TorchElasticEnvironment.detect()
    cluster = cluster_of(TorchElasticEnvironment(), num_devices=2, num_nodes=2)
    assert (cluster.rank, cluster.local_rank, cluster.world_size, cluster.node_rank) == (2, 0, 4, 1)
