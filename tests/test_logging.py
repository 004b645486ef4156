"""``self.log``: defaults, keys, weighted epoch means, reductions, torchmetrics, loggers and results."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryPrecision

import trainer
from tests import models
from tests.models import Regressor, loader, regression_data
from trainer.loggers.base import Logger


class Memory(Logger):
    """Keeps every ``log_metrics`` call."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.hparams: dict[str, Any] | None = None

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        self.hparams = params

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def values(self, key: str) -> list[tuple[int, float]]:
        return [(step, row[key]) for step, row in self.rows if key in row]

    def names(self) -> set[str]:
        return {k for _, row in self.rows for k in row}


def quiet(tmp_path: Path, **kwargs: Any) -> trainer.Trainer:
    return models.quiet(tmp_path, **{"max_epochs": 1, **kwargs})


def ten() -> TensorDataset:
    """x = 0..9 in the first feature: batches of 4 have means 1.5, 5.5, 8.5 (weights 4, 4, 2)."""
    x = torch.zeros(10, 8)
    x[:, 0] = torch.arange(10, dtype=torch.float32)
    return TensorDataset(x, torch.zeros(10, 1))


class Logs(Regressor):
    """Logs what a test asks for: ``train=[(name, kwargs)]``, ``val=[...]``; values come from the batch."""

    def __init__(self, train: list[Any] | None = None, val: list[Any] | None = None) -> None:
        super().__init__()
        self.train_logs = train or []
        self.val_logs = val or []

    @staticmethod
    def _value(batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int, what: str) -> Any:
        return batch[0][:, 0].mean() if what == "batch_mean" else float(batch_idx + 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        for name, what, kwargs in self.train_logs:
            self.log(name, self._value(batch, batch_idx, what), **kwargs)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        for name, what, kwargs in self.val_logs:
            self.log(name, self._value(batch, batch_idx, what), **kwargs)


# ---- defaults and keys -------------------------------------------------------------------------------
def test_defaults_training_per_step_validation_per_epoch(tmp_path: Path) -> None:
    mem = Memory()
    module = Logs(train=[("t", "idx", {})], val=[("v", "idx", {})])
    fit = quiet(tmp_path, max_epochs=2, logger=mem, log_every_n_steps=1)
    fit.fit(module, loader(ten(), batch_size=4), loader(ten(), batch_size=4))
    assert mem.values("t") == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 1.0), (4, 2.0), (5, 3.0)]  # Lightning's steps
    assert mem.values("v") == [(2, pytest.approx(1.8)), (5, pytest.approx(1.8))]  # (1*4 + 2*4 + 3*2) / 10
    assert not {"t_step", "t_epoch", "v_step", "v_epoch"} & mem.names()
    assert [row["epoch"] for step, row in mem.rows if "v" in row] == [0, 1]


def test_on_step_and_on_epoch_give_step_and_epoch_keys(tmp_path: Path) -> None:
    mem = Memory()
    module = Logs(
        train=[("x", "idx", dict(on_step=True, on_epoch=True))],
        val=[("y", "idx", dict(on_step=True, on_epoch=True))],
    )
    fit = quiet(tmp_path, logger=mem, log_every_n_steps=1)
    fit.fit(module, loader(ten(), batch_size=5), loader(ten(), batch_size=5))
    assert mem.values("x_step") == [(0, 1.0), (1, 2.0)]
    assert mem.values("x_epoch") == [(1, 1.5)]  # Lightning: at the epoch's last stepped batch
    assert mem.values("y_epoch") == [(1, 1.5)]  # Lightning: before the last batch is counted
    assert "x" not in mem.names() and "y" not in mem.names()
    assert {"x_step", "x_epoch", "y_epoch"} <= set(fit.callback_metrics)


def test_callbacks_see_every_step_while_loggers_write_every_n(tmp_path: Path) -> None:
    """callback_metrics hold each step's value; a value logged between writes goes out with the next one."""
    seen: list[float] = []

    class Watch(trainer.Callback):
        def on_train_batch_end(self, trainer: trainer.Trainer, module: trainer.Module, *args: Any) -> None:
            seen.append(float(trainer.callback_metrics["t"]))

    class Rare(Logs):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            if batch_idx == 0:
                self.log("rare", 42.0)
            return super().training_step(batch, batch_idx)

    mem = Memory()
    fit = quiet(tmp_path, max_epochs=2, logger=mem, log_every_n_steps=2, callbacks=[Watch()])
    fit.fit(Rare(train=[("t", "idx", {})]), loader(ten(), batch_size=4))
    assert seen == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    assert mem.values("t") == [(1, 2.0), (3, 1.0), (5, 3.0)]  # the 2nd, 4th, 6th step, at Lightning's steps
    assert mem.values("rare") == [(1, 42.0), (3, 42.0)]


# ---- epoch aggregation -------------------------------------------------------------------------------
def test_epoch_mean_is_weighted_by_batch_size(tmp_path: Path) -> None:
    ds = ten()
    module = Logs(
        train=[("train_mean", "batch_mean", dict(on_step=False, on_epoch=True))],
        val=[("val_mean", "batch_mean", {}), ("unweighted", "batch_mean", dict(batch_size=1))],
    )
    fit = quiet(tmp_path)
    fit.fit(module, loader(ds, batch_size=4, shuffle=True), loader(ds, batch_size=4))
    dataset_mean = ds.tensors[0][:, 0].mean().item()
    assert dataset_mean == 4.5
    assert fit.callback_metrics["val_mean"].item() == pytest.approx(dataset_mean, abs=1e-6)
    assert fit.callback_metrics["train_mean"].item() == pytest.approx(dataset_mean, abs=1e-6)
    # The mean of the batch means differs: the weights matter here.
    assert fit.callback_metrics["unweighted"].item() == pytest.approx((1.5 + 5.5 + 8.5) / 3, abs=1e-6)


@pytest.mark.parametrize(("fx", "expected"), [("sum", 6.0), ("max", 3.0), ("min", 1.0), ("mean", 1.8)])
def test_reduce_fx(tmp_path: Path, fx: str, expected: float) -> None:
    module = Logs(
        train=[("t", "idx", dict(on_step=False, on_epoch=True, reduce_fx=fx))],
        val=[("v", "idx", dict(reduce_fx=fx))],
    )
    fit = quiet(tmp_path)
    fit.fit(module, loader(ten(), batch_size=4), loader(ten(), batch_size=4))
    assert fit.callback_metrics["t"].item() == pytest.approx(expected)
    assert fit.callback_metrics["v"].item() == pytest.approx(expected)


def test_logger_false_and_prog_bar(tmp_path: Path, without_tensorboard: None) -> None:
    module = Logs(
        train=[
            ("hidden", "idx", dict(logger=False)),
            ("both_hidden", "idx", dict(on_epoch=True, logger=False)),
            ("shown", "idx", dict(prog_bar=True)),
            ("both_shown", "idx", dict(on_epoch=True, prog_bar=True)),
        ],
    )
    fit = quiet(tmp_path, logger=True, max_epochs=1, log_every_n_steps=1)
    fit.fit(module, loader(ten(), batch_size=4))
    with open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv", newline="") as f:
        columns = set(csv.DictReader(f).fieldnames or [])
    assert {"shown", "both_shown_step", "both_shown_epoch"} <= columns
    assert not {"hidden", "both_hidden_step", "both_hidden_epoch"} & columns
    assert {"hidden", "both_hidden_step", "both_hidden_epoch"} <= set(fit.callback_metrics)
    assert not {"hidden", "both_hidden_step"} & set(fit.logged_metrics)
    assert set(fit.progress_bar_metrics) == {"shown", "both_shown_step", "both_shown_epoch"}
    assert fit.progress_bar_metrics["both_shown_epoch"] == pytest.approx(1.8)


def test_log_without_a_trainer_warns_so_a_step_can_be_unit_tested() -> None:
    """As in Lightning: a test calling ``training_step`` directly runs through its ``self.log`` calls."""
    module = Regressor()
    with pytest.warns(
        UserWarning, match=r"self\.log\('train_loss', \.\.\.\)` but the `self\.trainer` reference is not"
    ):
        loss = module.training_step((torch.zeros(2, 8), torch.zeros(2, 1)), 0)
    assert loss.shape == ()
    with pytest.raises(ValueError, match=r"`self\.log\(loss, \[1, 2\]\)` was called, but `list` values cannot"):
        module.log("loss", [1, 2])  # a bad value is still an error
    with pytest.raises(RuntimeError, match=r"Regressor is not attached to a `Trainer`"):
        _ = Regressor().trainer


def test_log_rejects_non_scalars(tmp_path: Path) -> None:
    class Vector(Regressor):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            self.log("v", batch[0])
            return super().training_step(batch, batch_idx)

    with pytest.raises(
        ValueError,
        match=r"self\.log\(v, \.\.\.\)` was called with a tensor of shape \(4, 8\), but the tensor must have a single",
    ):
        quiet(tmp_path).fit(Vector(), loader(ten(), batch_size=4))


# ---- torchmetrics ------------------------------------------------------------------------------------
def labelled() -> TensorDataset:
    """10 samples; the prediction for sample i is ``x[i, 0] > threshold`` and the label ``y``."""
    x = torch.zeros(10, 8)
    x[:, 0] = torch.arange(10, dtype=torch.float32)
    y = torch.tensor([1, 1, 1, 1, 0, 0, 1, 1, 0, 1])
    return TensorDataset(x, y)


def accuracy(threshold: float, idx: slice = slice(None)) -> float:
    x, y = labelled().tensors
    return ((x[idx, 0] > threshold).long() == y[idx]).float().mean().item()


class WithMetric(Regressor):
    """Validation accuracy through a torchmetrics Metric; the threshold moves with the epoch."""

    def __init__(self, thresholds: list[float] | None = None) -> None:
        super().__init__()
        self.thresholds = thresholds or [0.5]
        self.acc = BinaryAccuracy()
        self.train_acc = BinaryAccuracy()
        self.train_acc_state_at_epoch_start: list[int] = []

    def _preds(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, 0] > self.thresholds[min(self.current_epoch, len(self.thresholds) - 1)]).long()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.train_acc(self._preds(x), y)
        self.log("train_acc", self.train_acc)  # on_step only: still reset at each epoch end
        return self.net(x).mean()

    def on_train_epoch_start(self) -> None:
        acc = self.train_acc
        self.train_acc_state_at_epoch_start.append(int(acc.tp + acc.fp + acc.tn + acc.fn))

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.acc.update(self._preds(x), y)
        self.log("val_acc", self.acc)


def test_metric_is_computed_over_the_epoch_and_reset(tmp_path: Path) -> None:
    thresholds = [-1.0, 5.5]
    expected = [accuracy(t) for t in thresholds]
    assert expected == pytest.approx([0.7, 0.5])  # accumulated over both epochs it would be 0.6
    first_batch = accuracy(thresholds[0], slice(0, 4))
    assert first_batch != expected[0]  # so a sanity-check batch left in the state would show
    mem = Memory()
    module = WithMetric(thresholds)
    fit = quiet(tmp_path, max_epochs=2, logger=mem, num_sanity_val_steps=1)
    fit.fit(module, loader(labelled(), batch_size=4), loader(labelled(), batch_size=4))
    assert [v for _, v in mem.values("val_acc")] == pytest.approx(expected)
    assert module.train_acc_state_at_epoch_start == [0, 0]
    assert fit.validate(module, loader(labelled(), batch_size=3)) == [{"val_acc": pytest.approx(accuracy(5.5))}]


def test_metric_collection_through_log_dict(tmp_path: Path) -> None:
    class WithCollection(WithMetric):
        def __init__(self) -> None:
            super().__init__([2.5])
            self.metrics = MetricCollection([BinaryAccuracy(), BinaryPrecision()], prefix="val_")

        def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
            x, y = batch
            self.metrics.update(self._preds(x), y)
            self.log_dict(self.metrics)

    x, y = labelled().tensors
    preds = (x[:, 0] > 2.5).long()
    precision = ((preds == 1) & (y == 1)).sum().item() / (preds == 1).sum().item()
    result = quiet(tmp_path).validate(WithCollection(), loader(labelled(), batch_size=4))
    assert result == [
        {"val_BinaryAccuracy": pytest.approx(accuracy(2.5)), "val_BinaryPrecision": pytest.approx(precision)}
    ]
    assert precision != accuracy(2.5)


def test_logging_in_on_train_epoch_end_is_recorded(tmp_path: Path) -> None:
    """Lightning's usual pattern: compute an epoch value in ``on_train_epoch_end`` and log it."""

    class EpochEnd(Regressor):
        def on_train_epoch_end(self) -> None:
            self.log("epoch_value", float(self.current_epoch + 1))

    mem = Memory()
    fit = quiet(tmp_path, max_epochs=2, logger=mem)
    fit.fit(EpochEnd(), loader(ten(), batch_size=4))
    assert mem.values("epoch_value") == [(2, 1.0), (5, 2.0)]  # Lightning's: the epoch's last stepped batch


# ---- loggers on disk -----------------------------------------------------------------------------------
@pytest.fixture
def without_tensorboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without tensorboard: the default logger (``logger=True``) is then a CSVLogger."""
    import trainer.loggers.build

    monkeypatch.setattr(trainer.loggers.build, "tensorboard_available", lambda: False)


def test_default_csv_logger_writes_metrics_and_hparams(tmp_path: Path, without_tensorboard: None) -> None:
    fit = quiet(tmp_path, logger=True, max_epochs=2, log_every_n_steps=2)
    fit.fit(
        Regressor(features=8, lr=0.01),
        loader(regression_data(32), batch_size=8),
        loader(regression_data(16), batch_size=8),
    )
    folder = tmp_path / "lightning_logs" / "version_0"
    assert fit.log_dir == str(folder)
    with open(folder / "metrics.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        assert reader.fieldnames == ["epoch", "step", "train_loss", "val_loss"]  # Lightning's: sorted
    train_steps = [int(r["step"]) for r in rows if r.get("train_loss")]
    val_steps = [int(r["step"]) for r in rows if r.get("val_loss")]
    assert train_steps == [1, 3, 5, 7] and val_steps == [3, 7]  # Lightning's steps
    assert [float(r["epoch"]) for r in rows if r.get("val_loss")] == [0, 1]
    assert float(rows[-1]["val_loss"]) == pytest.approx(fit.callback_metrics["val_loss"].item())
    # as Lightning: only save_hyperparameters() reaches the loggers (the automatic record is for checkpoints)
    assert not (folder / "hparams.yaml").exists()

    class Saved(Regressor):
        def __init__(self, features: int = 8) -> None:
            super().__init__(features)
            self.save_hyperparameters()

    quiet(tmp_path, logger=True, max_epochs=1).fit(Saved(), loader(regression_data(8)))
    assert yaml.safe_load((tmp_path / "lightning_logs" / "version_1" / "hparams.yaml").read_text()) == {"features": 8}


# ---- validate / test / predict ---------------------------------------------------------------------------
class Evaluated(Regressor):
    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y))
        self.log("test_count", float(len(x)), reduce_fx="sum")

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])


def test_validate_test_and_predict(tmp_path: Path) -> None:
    ds = regression_data(10)
    module = Evaluated()
    fit = quiet(tmp_path)
    x, y = ds.tensors
    with torch.no_grad():
        full_loss = torch.nn.functional.mse_loss(module.net(x), y).item()
        outputs = module.net(x)
    assert fit.validate(module, loader(ds, batch_size=4)) == [{"val_loss": pytest.approx(full_loss, rel=1e-5)}]
    assert fit.test(module, loader(ds, batch_size=3)) == [
        {"test_count": 10.0, "test_loss": pytest.approx(full_loss, rel=1e-5)}
    ]
    predictions = fit.predict(module, loader(ds, batch_size=3))
    assert [len(p) for p in predictions] == [3, 3, 3, 1]
    torch.testing.assert_close(torch.cat(predictions), outputs)


class Data(trainer.DataModule):
    def __init__(self) -> None:
        self.stages: list[str] = []

    def setup(self, stage: str) -> None:
        self.stages.append(stage)
        self.ds = regression_data(16)

    def train_dataloader(self) -> DataLoader[Any]:
        return loader(self.ds, batch_size=4)

    def val_dataloader(self) -> DataLoader[Any]:
        return loader(self.ds, batch_size=8)

    def test_dataloader(self) -> DataLoader[Any]:
        return loader(self.ds, batch_size=8)

    def predict_dataloader(self) -> DataLoader[Any]:
        return loader(self.ds, batch_size=8)


def test_datamodule(tmp_path: Path) -> None:
    dm = Data()
    module = Evaluated()
    fit = quiet(tmp_path, max_epochs=2)
    fit.fit(module, dm)
    assert dm.stages == ["fit"]
    assert fit.global_step == 8 and "val_loss" in fit.callback_metrics
    quiet(tmp_path, max_epochs=1).fit(module, datamodule=dm)
    assert fit.validate(module, datamodule=dm)[0].keys() == {"val_loss"}
    assert fit.test(module, datamodule=dm)[0]["test_count"] == 16.0
    assert len(fit.predict(module, datamodule=dm)) == 2
    assert dm.stages == ["fit", "fit", "validate", "test", "predict"]


# ---- an epoch shorter than the logging interval ---------------------------------------------------------
def test_an_epoch_shorter_than_log_every_n_steps_warns_naming_both(tmp_path: Path) -> None:
    data = loader(regression_data(n=100), batch_size=4)  # 25 batches an epoch
    with pytest.warns(UserWarning, match=r"training batches \(25\) is smaller than .*log_every_n_steps=50\)"):
        models.quiet(tmp_path, max_epochs=1, logger=True).fit(Regressor(), data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the interval fits, or nothing logs
        warnings.filterwarnings("ignore", "You defined a `validation_step` but have no `val_dataloader`")
        models.quiet(tmp_path, max_epochs=1, logger=True, log_every_n_steps=25).fit(Regressor(), data)
        models.quiet(tmp_path, max_epochs=1, logger=False).fit(Regressor(), data)


def test_batch_end_hooks_log_into_the_step_row_and_a_callback_writes_before_it() -> None:
    """Lightning sends a step's values to the loggers after the batch-end hooks: a value a hook logs joins
    that step's row, and a callback writing to the logger itself there (DeviceStatsMonitor) comes first."""

    class Hooked(Regressor):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.log("hook_value", float(batch_idx))

    class Writes(trainer.Callback):
        def on_train_batch_end(self, tr: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            tr.logger.log_metrics({"direct": float(batch_idx)}, step=tr.global_step - 1)

    memory = Memory()
    fit = trainer.Trainer(
        max_epochs=1,
        limit_train_batches=4,
        log_every_n_steps=2,
        logger=memory,
        callbacks=[Writes()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    fit.fit(Hooked(), loader(regression_data(32), batch_size=8))
    steps = [(step, sorted(row)) for step, row in memory.rows if "epoch" in row or "direct" in row]
    assert steps == [
        (0, ["direct"]),
        (1, ["direct"]),
        (1, ["epoch", "hook_value", "train_loss"]),
        (2, ["direct"]),
        (3, ["direct"]),
        (3, ["epoch", "hook_value", "train_loss"]),
    ]
    assert [row["hook_value"] for _, row in memory.rows if "hook_value" in row] == [1.0, 3.0]


class _TwoRanks:
    """A stand-in strategy for two ranks whose other rank logged the same values as this one."""

    world_size, is_global_zero = 2, True

    def gather_objects(self, obj: Any) -> list[Any]:
        return [obj, obj]

    def all_reduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        return tensor * 2 if op == "sum" else tensor


def test_only_sync_dist_values_are_reduced_across_ranks_and_the_others_warn_as_lightning() -> None:
    from trainer import results as results_module
    from trainer.results import Results

    results_module._WARNED_UNSYNCED.discard("own")  # Lightning's hint comes once per name and process
    results = Results("validate")
    results.batch = torch.zeros(4, 1)
    results.log("synced", 2.0, sync_dist=True, reduce_fx="sum")
    results.log("own", 2.0, reduce_fx="sum")
    with pytest.warns(UserWarning, match=r"self.log\('own', ..., sync_dist=True\)") as caught:
        values = results.epoch_metrics(_TwoRanks())  # type: ignore[arg-type]
    assert float(values["synced"]) == 4.0 and float(values["own"]) == 2.0  # the rank's own, as Lightning
    assert not any("'synced'" in str(w.message) for w in caught)
