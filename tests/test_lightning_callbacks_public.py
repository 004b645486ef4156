"""Lightning behaviours of the Trainer and its callbacks that ported Lightning projects rely on: a finished Trainer
pickles, progress bars show the epoch-end metrics, and the callback hooks a project overrides get their arguments."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import Regressor, loader, quiet, regression_data


def test_a_fitted_trainer_and_its_module_pickle_and_load(tmp_path: Path) -> None:
    run = quiet(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    module = Regressor()
    run.fit(module, loader(regression_data(32)), {"a": loader(regression_data(16))})
    buffer = io.BytesIO()
    torch.save(run, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    optimizer = loaded.lightning_module.optimizers()
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.param_groups[0]["lr"] == module.lr
    assert pickle.loads(pickle.dumps(module)).lr == module.lr


class NoValidation(Regressor):
    """``val_dataloader`` returning []: Lightning's way to say there is no validation."""

    def train_dataloader(self) -> DataLoader:
        return loader(regression_data(32))

    def val_dataloader(self) -> list[DataLoader]:
        return []

    def test_dataloader(self) -> list[DataLoader]:
        return []

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        raise AssertionError("no test loaders: no test step")


def test_val_dataloader_returning_an_empty_list_means_no_validation(tmp_path: Path) -> None:
    run = quiet(tmp_path, max_epochs=1, limit_train_batches=2, num_sanity_val_steps=2)
    with pytest.warns(UserWarning, match="validation loaders are an empty list"):
        run.fit(NoValidation())
    assert run.global_step == 2
    assert "val_loss" not in run.callback_metrics
    with pytest.warns(UserWarning, match="test loaders are an empty list"):
        assert run.test(NoValidation()) == []


def test_a_mock_callback_from_configure_callbacks_gets_the_same_hooks_as_a_trainer_one(tmp_path: Path) -> None:
    from_trainer, from_module = Mock(spec=trainer.Callback), Mock(spec=trainer.Callback)

    class Configured(Regressor):
        def configure_callbacks(self) -> list[trainer.Callback]:
            return [from_module]

    run = quiet(tmp_path, max_epochs=1, limit_train_batches=2, callbacks=[from_trainer])
    run.fit(Configured(), loader(regression_data(32)), loader(regression_data(16)))
    assert run.callbacks[-1] is from_module
    assert [c[0] for c in from_module.method_calls] == [c[0] for c in from_trainer.method_calls]
    assert "on_train_batch_end" in [c[0] for c in from_module.method_calls]


def test_a_model_summary_subclass_gets_lightnings_summarize_arguments(tmp_path: Path) -> None:
    seen: list[tuple[Any, ...]] = []

    class Collected(trainer.ModelSummary):
        @staticmethod
        def summarize(
            summary_data: list[tuple[str, list[str]]],
            total_parameters: int,
            trainable_parameters: int,
            model_size: float,
            total_training_modes: dict[str, int],
            **summarize_kwargs: Any,
        ) -> None:
            seen.append(
                (dict(summary_data), total_parameters, trainable_parameters, total_training_modes, summarize_kwargs)
            )

    module = Regressor()
    module.net[0].requires_grad_(False)
    run = quiet(tmp_path, max_steps=1, callbacks=[Collected(colour="red")])
    run.fit(module, loader(regression_data(16)))
    (columns, total, trainable, modes, kwargs) = seen[0]
    assert columns["Name"] == ["net"] and columns["Type"] == ["Sequential"]
    assert total == sum(p.numel() for p in module.parameters())
    assert trainable == total - sum(p.numel() for p in module.net[0].parameters())
    assert modes == {"train": len(list(module.modules())) - 1, "eval": 0}
    assert kwargs["colour"] == "red" and isinstance(kwargs["total_flops"], int)


def test_a_mock_logger_with_a_save_dir_gets_the_metrics_and_is_the_run_folder(tmp_path: Path) -> None:
    logger = Mock()
    logger.save_dir = str(tmp_path / "logs")
    run = quiet(tmp_path, max_steps=2, log_every_n_steps=1, logger=logger)
    run.fit(Regressor(), loader(regression_data(16)))
    assert run.log_dir == logger.save_dir
    assert logger.log_metrics.call_count >= 2  # the training loss of each step


class _RanksFailed:
    """Stands in for the ddp_spawn launcher whose rank raised: the error arrives here after the ranks ended."""

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("rank 0 failed: Exception: boom")


class _Counted(trainer.Callback):
    def __init__(self) -> None:
        self.errors: list[str] = []

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.errors.append(str(exception))


def test_a_spawned_stage_that_failed_reaches_on_exception_in_this_process(tmp_path: Path) -> None:
    counted = _Counted()
    saver = Mock(spec=trainer.ModelCheckpoint)
    run = quiet(tmp_path, max_steps=1, callbacks=[counted, saver], enable_checkpointing=True)
    run.strategy.launcher = _RanksFailed()
    module = Regressor()
    with pytest.raises(RuntimeError, match="boom"):
        run.fit(module, loader(regression_data(16)))
    assert counted.errors == ["rank 0 failed: Exception: boom"]
    assert run.lightning_module is module and run.state.status == "interrupted"
    assert not saver.on_exception.called  # the ranks saved; the weights here are not the trained ones
    with pytest.raises(RuntimeError, match="boom"):
        run.validate(module, loader(regression_data(16)))
    assert len(counted.errors) == 2


class _StepCounted(Regressor):
    """Logs the global step as an epoch value (its max): epoch e of two steps shows 2e + 1."""

    read: list[tuple[str, Any]]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.log("seen", float(self.global_step), on_step=False, on_epoch=True, reduce_fx="max", prog_bar=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_seen", float(self.global_step), reduce_fx="max", prog_bar=True)

    def on_train_epoch_end(self) -> None:
        self.read.append(("module", float(self.trainer.callback_metrics["seen"])))


class _Reader(trainer.Callback):
    def __init__(self, read: list[tuple[str, Any]]) -> None:
        self.read = read

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.read.append(("bar", trainer.progress_bar_metrics.get("seen")))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            self.read.append(("sanity", dict(trainer.progress_bar_metrics)))

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.read.append(("start", dict(trainer.callback_metrics)))


def test_every_train_epoch_end_hook_reads_this_epochs_values_and_the_sanity_check_its_own(tmp_path: Path) -> None:
    module, read = _StepCounted(), []
    module.read = read
    run = quiet(tmp_path, max_epochs=2, limit_train_batches=2, num_sanity_val_steps=1, callbacks=[_Reader(read)])
    run.fit(module, loader(regression_data(32)), loader(regression_data(16)))
    assert read == [
        ("sanity", {"val_seen": 0.0}),
        ("start", {}),  # the sanity check's values are gone when training starts, as in Lightning
        ("bar", 1.0),
        ("module", 1.0),
        ("bar", 3.0),
        ("module", 3.0),
    ]
