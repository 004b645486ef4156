"""Lightning's everyday Trainer flags: debug runs, reloading loaders, step estimates, true half precision,
profilers, anomaly detection, model summary and time limits."""

from __future__ import annotations

import copy
import json
import math
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer
from tests.models import Regressor, assert_bitwise_equal, loader, quiet, regression_data
from trainer.callbacks import Timer


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


class Counting(Regressor):
    """Counts the batches each stage ran and records which samples training saw."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counts: dict[str, int] = {"train": 0, "val": 0, "test": 0, "predict": 0}
        self.seen: list[list[float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.counts["train"] += 1
        self.seen.append(batch[0][:, 0].tolist())
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.counts["val"] += 1
        super().validation_step(batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.counts["test"] += 1

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        self.counts["predict"] += 1
        return self.net(batch[0])


# ---- fast_dev_run ----------------------------------------------------------------------------------
@pytest.mark.parametrize("flag, batches", [(True, 1), (3, 3)])
def test_fast_dev_run_runs_n_batches_of_every_stage_and_writes_nothing(
    tmp_path: Path, flag: bool | int, batches: int, capsys: pytest.CaptureFixture[str]
) -> None:
    module = Counting()
    data = loader(regression_data(n=64), batch_size=4)
    t = trainer.Trainer(
        accelerator="cpu", fast_dev_run=flag, max_epochs=5, default_root_dir=tmp_path, enable_progress_bar=False
    )
    t.fit(module, data, data)
    t.test(module, data, verbose=False)
    t.predict(module, data)
    assert module.counts == {"train": batches, "val": batches, "test": batches, "predict": batches}
    assert t.global_step == batches and t.current_epoch == 1
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("*.csv"))
    assert f"fast_dev_run: {batches} batch(es)" in capsys.readouterr().out


def test_fast_dev_run_logs_to_a_dummy_logger_that_takes_any_call(tmp_path: Path) -> None:
    """Lightning's: the loggers become one DummyLogger, so ``self.logger.experiment.<anything>`` and a
    LearningRateMonitor still run; ``log_dir`` is None; ``logger=False`` stays without loggers."""
    from trainer.callbacks import LearningRateMonitor
    from trainer.loggers import DummyLogger

    class UsesLogger(Counting):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            logger: Any = self.logger
            logger.experiment.add_histogram("w", self.net[0].weight, self.global_step)
            logger.experiment["table"].log(1)
            return super().training_step(batch, batch_idx)

    data = loader(regression_data(n=16), batch_size=4)
    t = trainer.Trainer(
        accelerator="cpu",
        fast_dev_run=True,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        callbacks=[LearningRateMonitor()],
    )
    t.fit(UsesLogger(), data)
    assert isinstance(t.logger, DummyLogger) and t.loggers == [t.logger] and t.logger[0] is t.logger
    assert t.log_dir is None and t.logger.save_dir is None and t.logger.version == ""
    assert not list(tmp_path.rglob("*"))  # it writes nothing
    assert quiet(tmp_path, fast_dev_run=True, logger=False).loggers == []
    copied = copy.deepcopy(t.logger)  # copy and pickle see a plain object, not a no-op ``__deepcopy__``
    assert isinstance(copied, DummyLogger) and isinstance(pickle.loads(pickle.dumps(t.logger)), DummyLogger)


@pytest.mark.parametrize("bad", [-1, 1.5, "yes"])
def test_fast_dev_run_refuses_other_values(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"fast_dev_run={bad!r}")):
        quiet(tmp_path, fast_dev_run=bad)


# ---- overfit_batches -------------------------------------------------------------------------------
def test_overfit_batches_trains_the_same_unshuffled_batches_every_epoch(tmp_path: Path) -> None:
    x = torch.arange(32, dtype=torch.float32)[:, None].repeat(1, 8)
    data = DataLoader(TensorDataset(x, torch.zeros(32, 1)), batch_size=4, shuffle=True)
    module = Counting()
    with pytest.warns(UserWarning, match="requested to overfit but enabled train dataloader shuffling"):
        quiet(tmp_path, max_epochs=3, overfit_batches=2).fit(module, data, data)
    assert module.seen == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]] * 3
    assert module.counts["val"] == 3 * 2  # validation is cut to the same number of batches


def test_overfit_batches_as_a_fraction(tmp_path: Path) -> None:
    module = Counting()
    data = loader(regression_data(n=40), batch_size=4)  # 10 batches
    quiet(tmp_path, max_epochs=1, overfit_batches=0.25).fit(module, data)
    assert module.counts["train"] == 2


# ---- reload_dataloaders_every_n_epochs --------------------------------------------------------------
class Curriculum(Regressor):
    """A new, epoch-dependent training set at each request, drawn from the global RNG (a random subset)."""

    def __init__(self) -> None:
        super().__init__(dropout=0.2)
        self.requested_at: list[int] = []
        self.base = regression_data(n=64)

    def train_dataloader(self) -> DataLoader:
        self.requested_at.append(self.trainer.current_epoch)
        size = 16 + 8 * self.trainer.current_epoch
        keep = torch.randperm(64)[:size]
        x, y = self.base.tensors
        return DataLoader(TensorDataset(x[keep], y[keep]), batch_size=4, shuffle=True)


def test_reload_requests_new_loaders_every_n_epochs(tmp_path: Path) -> None:
    module = Curriculum()
    t = quiet(tmp_path, max_epochs=5, reload_dataloaders_every_n_epochs=2)
    t.fit(module)
    assert module.requested_at == [0, 2, 4]
    assert t.num_training_batches == (16 + 8 * 4) // 4


def test_reload_warns_that_loaders_given_to_fit_stay_the_same(tmp_path: Path) -> None:
    data = loader(regression_data(n=16), batch_size=4)
    with pytest.warns(UserWarning, match="does not change the training loader"):
        quiet(tmp_path, max_epochs=2, reload_dataloaders_every_n_epochs=1).fit(Regressor(), data)


def _curriculum_run(root: Path, ckpt: Path | None = None, every: int = 2) -> tuple[list[torch.Tensor], Curriculum]:
    torch.manual_seed(0)
    module = Curriculum()
    saver = trainer.ModelCheckpoint(dirpath=root / "ckpts", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    t = quiet(root, max_epochs=5, reload_dataloaders_every_n_epochs=every, callbacks=[saver], enable_checkpointing=True)
    t.fit(module, ckpt_path=ckpt)
    return _params(module), module


def test_a_resumed_run_with_reloaded_loaders_is_bitwise_equal(tmp_path: Path) -> None:
    """Epoch e trains 4 + 2e batches; a loader requested at epoch 2 serves epochs 2 and 3. Resuming in
    epoch 3 (mid-epoch) or at its start requests it again as it was at epoch 2: same subset, same order."""
    final, _ = _curriculum_run(tmp_path / "full")
    # steps: epoch 0 ends at 4, epoch 1 at 10, epoch 2 at 18, epoch 3 at 28
    for step in (6, 18, 21, 24, 30):
        resumed, module = _curriculum_run(tmp_path / f"at{step}", tmp_path / "full" / "ckpts" / f"step={step}.ckpt")
        assert_bitwise_equal(resumed, final)
        assert module.requested_at[-1] == 4


# ---- estimated_stepping_batches -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(max_epochs=3), 30),
        (dict(max_epochs=3, accumulate_grad_batches=4), 9),  # ceil(10 / 4) per epoch: the last window steps
        (dict(max_epochs=3, limit_train_batches=4), 12),
        (dict(max_epochs=3, max_steps=7), 7),
        (dict(max_epochs=-1, max_steps=25), 25),
    ],
)
def test_estimated_stepping_batches_in_configure_optimizers(
    tmp_path: Path, kwargs: dict[str, Any], expected: int
) -> None:
    seen: list[int | float] = []

    class OneCycle(Regressor):
        def configure_optimizers(self) -> Any:
            total = self.trainer.estimated_stepping_batches
            seen.append(total)
            opt = torch.optim.SGD(self.parameters(), lr=0.01)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=total)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    t = quiet(tmp_path, **kwargs)
    t.fit(OneCycle(), loader(regression_data(n=40), batch_size=4))  # OneCycleLR raises if stepped past total
    assert seen == [expected]
    assert t.global_step == expected


def test_estimated_stepping_batches_outside_fit_says_when_it_is_known(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="configure_optimizers"):
        quiet(tmp_path, max_epochs=1).estimated_stepping_batches  # noqa: B018


# ---- true half precision ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "precision, dtype", [("bf16-true", torch.bfloat16), ("16-true", torch.float16), ("64-true", torch.float64)]
)
def test_true_half_precision_equals_a_hand_written_half_loop(tmp_path: Path, precision: str, dtype: Any) -> None:
    data = regression_data(n=32)
    torch.manual_seed(0)
    module = Regressor()
    quiet(tmp_path, max_epochs=2, precision=precision).fit(module, loader(data, batch_size=8))
    assert {p.dtype for p in module.parameters()} == {dtype}

    torch.manual_seed(0)
    ref = Regressor().to(dtype)
    opt = ref.configure_optimizers()
    for _ in range(2):
        for x, y in loader(data, batch_size=8):
            before = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                loss = torch.nn.functional.mse_loss(ref.net(x.to(dtype)), y.to(dtype))
            finally:
                torch.set_default_dtype(before)
            loss.backward()
            opt.step()
            opt.zero_grad()
    assert_bitwise_equal(_params(module), _params(ref))
    assert torch.get_default_dtype() == torch.float32  # put back after every step


def test_true_half_precision_leaves_integer_inputs_alone(tmp_path: Path) -> None:
    dtypes: list[tuple[torch.dtype, torch.dtype]] = []

    class Classifier(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, labels = batch
            dtypes.append((x.dtype, labels.dtype))
            return self.net(x).float().mean() * 0 + labels.float().mean() * 0 + self.net(x).float().pow(2).mean()

    data = DataLoader(TensorDataset(torch.randn(8, 8), torch.arange(8)), batch_size=4)
    quiet(tmp_path, max_epochs=1, precision="bf16-true").fit(Classifier(), data)
    assert dtypes == [(torch.bfloat16, torch.int64)] * 2


def test_an_unknown_precision_names_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Precision 'bf16-fancy' is invalid.*bf16-true"):
        quiet(tmp_path, precision="bf16-fancy")


@pytest.mark.parametrize("precision", [None, "32-true", 32])
def test_precision_none_is_lightnings_default_32_true(tmp_path: Path, precision: Any) -> None:
    t = quiet(tmp_path, precision=precision, max_epochs=1)
    assert t.precision == "32-true"  # Lightning's string; the plug-in is precision_plugin
    module = Regressor()
    t.fit(module, loader(regression_data(n=16), batch_size=8))
    assert {p.dtype for p in module.parameters()} == {torch.float32}


@pytest.mark.parametrize("precision", ["64", 64, "64-true"])
def test_precision_64_names_double_precision(tmp_path: Path, precision: Any) -> None:
    assert quiet(tmp_path, precision=precision).precision == "64-true"


# ---- profilers ---------------------------------------------------------------------------------------
def test_simple_profiler_reports_the_step_hooks_and_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Hooked(Regressor):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            pass

    data = loader(regression_data(n=16), batch_size=4)
    quiet(tmp_path, max_epochs=2, profiler="simple", num_sanity_val_steps=1).fit(Hooked(), data, data)
    report = capsys.readouterr().out
    row = re.compile(r"^\| (\S[^|]*?) \|[^|]+\| +(\d+) \|", re.M)
    rows = {m.group(1).strip(): int(m.group(2)) for m in row.finditer(report)}
    assert rows["run_training_batch"] == 8
    assert rows["[Module]Hooked.on_train_batch_end"] == 8
    assert rows["[_TrainingEpochLoop].train_dataloader_next"] >= 8
    assert rows["[Strategy]SingleDeviceStrategy.validation_step"] == 1 + 2 * 4  # sanity check, then 2 epochs
    assert rows["[Module]Hooked.on_fit_start"] == 1
    assert "[Callback]" not in report  # quiet(): no callbacks, so none are timed


def test_advanced_profiler_reports_cprofile_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = loader(regression_data(n=16), batch_size=4)
    quiet(tmp_path, max_epochs=1, profiler="advanced").fit(Regressor(), data)
    out = capsys.readouterr().out
    assert "run_training_batch" in out and "function calls" in out and "mse_loss" in out


def test_pytorch_profiler_writes_a_chrome_trace_in_the_run_folder(tmp_path: Path) -> None:
    data = loader(regression_data(n=16), batch_size=4)
    t = quiet(tmp_path, max_epochs=1, profiler="pytorch", logger=True)
    t.fit(Regressor(), data)
    traces = list(Path(t.log_dir).rglob("*trace*.json"))
    assert traces, list(Path(t.log_dir).rglob("*"))
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert any("aten::addmm" in str(e.get("name")) for e in events)


def test_pytorch_profiler_takes_lightnings_options(tmp_path: Path) -> None:
    """Module names as ranges, shapes grouped, table_kwargs in the report, no trace when export_to_chrome=False."""
    from trainer.profilers import PyTorchProfiler

    data = loader(regression_data(n=16), batch_size=4)
    profiler = PyTorchProfiler(
        dirpath=tmp_path / "prof",
        group_by_input_shapes=True,
        export_to_chrome=False,
        table_kwargs={"max_name_column_width": 80},
    )
    quiet(tmp_path, max_epochs=1, profiler=profiler).fit(Regressor(), data)
    report = profiler.summary()
    assert "[pl][module]torch.nn.modules.linear.Linear: net.0" in report and "Input Shapes" in report
    assert not list((tmp_path / "prof").glob("*trace*.json"))
    with pytest.raises(KeyError, match=r"table_kwargs=.'sort_by'"):
        PyTorchProfiler(table_kwargs={"sort_by": "count"})
    with pytest.raises(ValueError, match="sort_by_key='speed'"):
        PyTorchProfiler(sort_by_key="speed")


def test_advanced_profiler_dumps_each_actions_stats(tmp_path: Path) -> None:
    import pstats

    from trainer.profilers import AdvancedProfiler

    data = loader(regression_data(n=16), batch_size=4)
    quiet(tmp_path, max_epochs=1, profiler=AdvancedProfiler(tmp_path / "prof", "adv", dump_stats=True)).fit(
        Regressor(), data
    )
    dumped = sorted(p.name for p in (tmp_path / "prof").glob("*.prof"))
    assert "fit-adv-run_training_batch.prof" in dumped
    assert pstats.Stats(str(tmp_path / "prof" / "fit-adv-run_training_batch.prof")).total_calls > 0


def test_an_unknown_profiler_names_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"profiler='fast'.*simple, advanced, pytorch"):
        quiet(tmp_path, profiler="fast")


# ---- detect_anomaly, benchmark, sync_batchnorm -----------------------------------------------------------
def test_detect_anomaly_names_the_op_that_made_a_nan(tmp_path: Path) -> None:
    class NanGrad(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return (self.net(batch[0]) * 0).sqrt().sum()  # d sqrt(0) = inf, times 0: NaN gradient

    data = loader(regression_data(n=8), batch_size=4)
    nan = pytest.raises(RuntimeError, match=r"Backward0' returned nan values")
    with nan, pytest.warns(UserWarning, match="anomaly"):
        quiet(tmp_path, max_epochs=1, detect_anomaly=True, on_nonfinite_loss="off").fit(NanGrad(), data)


def test_benchmark_sets_cudnn_benchmark(tmp_path: Path) -> None:
    before = torch.backends.cudnn.benchmark
    try:
        quiet(tmp_path, benchmark=True)
        assert torch.backends.cudnn.benchmark is True
        quiet(tmp_path, benchmark=False)
        assert torch.backends.cudnn.benchmark is False
    finally:
        torch.backends.cudnn.benchmark = before


def test_sync_batchnorm_on_one_process_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sync_batchnorm=True needs several processes"):
        quiet(tmp_path, sync_batchnorm=True)


# ---- model summary and max_time ----------------------------------------------------------------------
def test_the_model_summary_is_on_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = loader(regression_data(n=8), batch_size=4)
    quiet(tmp_path, max_epochs=1, enable_model_summary=True).fit(Regressor(), data)
    assert re.search(r"\| Name \| Type +\| Params", capsys.readouterr().out)
    assert any(isinstance(cb, trainer.ModelSummary) for cb in trainer.Trainer(logger=False).callbacks)
    quiet(tmp_path, max_epochs=1).fit(Regressor(), data)  # enable_model_summary=False
    assert "Params" not in capsys.readouterr().out


def test_max_time_stops_training_and_conflicts_with_a_timer(tmp_path: Path) -> None:
    data = loader(regression_data(n=64), batch_size=4)
    t = quiet(tmp_path, max_epochs=100, max_time={"seconds": 0})
    t.fit(Regressor(), data)
    assert t.global_step == 0 and any(isinstance(cb, Timer) for cb in t.callbacks)
    with pytest.raises(ValueError, match="max_time= and a Timer"):
        quiet(tmp_path, max_time="00:00:01:00", callbacks=[Timer("00:00:02:00")])
    with pytest.raises(ValueError, match="DD:HH:MM:SS"):
        quiet(tmp_path, max_time="ten minutes")


# ---- the console after a resume ------------------------------------------------------------------------
def test_a_resumed_run_says_where_it_resumed_and_its_rate_is_right(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = loader(regression_data(n=32), batch_size=4)
    saver = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    quiet(tmp_path, max_epochs=1, callbacks=[saver], enable_checkpointing=True).fit(Regressor(), data)
    capsys.readouterr()
    bar = trainer.ProgressBar(refresh_rate=1, line_interval_s=0)
    path = tmp_path / "ckpts" / "step=3.ckpt"
    quiet(tmp_path, max_epochs=1, callbacks=[bar], enable_progress_bar=True).fit(Regressor(), data, ckpt_path=path)
    out = capsys.readouterr().out
    assert f"resumed from {path} at epoch 0, step 3" in out
    rates = [float(r) for r in re.findall(r"([\d.]+)it/s", out)]
    assert len(rates) >= 5 and all(0 < r < 1e6 for r in rates) and not math.isinf(max(rates))
