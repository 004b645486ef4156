"""Each ``self.log`` option has Lightning's effect (what tests/test_logging.py does not already prove)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, regression_data
from tests.test_logging import Logs, Memory, quiet, ten


def test_on_step_and_on_epoch_also_give_callbacks_the_plain_name(tmp_path: Path) -> None:
    seen: list[float] = []

    class Watch(trainer.Callback):
        def on_train_batch_end(self, trainer: trainer.Trainer, module: trainer.Module, *args: Any) -> None:
            seen.append(float(trainer.callback_metrics["x"]))

    mem = Memory()
    fit = quiet(tmp_path, logger=mem, log_every_n_steps=1, callbacks=[Watch()])
    fit.fit(Logs(train=[("x", "idx", dict(on_step=True, on_epoch=True))]), loader(ten(), batch_size=5))
    assert seen == [1.0, 2.0]  # the step value during the epoch
    assert fit.callback_metrics["x"].item() == 1.5 == fit.callback_metrics["x_epoch"].item()  # then the epoch's
    assert "x" not in mem.names() and "x" not in fit.progress_bar_metrics


def test_monitor_the_plain_name_of_a_forked_value(tmp_path: Path) -> None:
    stop = trainer.EarlyStopping("y", patience=0, mode="min")
    fit = quiet(tmp_path, max_epochs=3, callbacks=[stop])
    module = Logs(val=[("y", "idx", dict(on_step=True, on_epoch=True))])
    fit.fit(module, loader(ten(), batch_size=5), loader(ten(), batch_size=5))
    assert fit.current_epoch == 2  # y never improves: stopped after patience 0 + 1 epochs


@pytest.mark.parametrize(
    ("fx", "expected"),
    [(torch.max, 3.0), (builtins.max, 3.0), (torch.min, 1.0), (builtins.sum, 6.0), ("AVG", 1.8), ("Sum", 6.0)],
)
def test_reduce_fx_callables_and_names_as_lightning_accepts(tmp_path: Path, fx: Any, expected: float) -> None:
    fit = quiet(tmp_path)
    fit.fit(Logs(train=[("t", "idx", dict(on_step=False, on_epoch=True, reduce_fx=fx))]), loader(ten(), batch_size=4))
    assert fit.callback_metrics["t"].item() == pytest.approx(expected)


@pytest.mark.parametrize("fx", [torch.median, "median"])
def test_a_custom_reduction_is_refused_naming_the_option(tmp_path: Path, fx: Any) -> None:
    module = Logs(train=[("t", "idx", dict(on_epoch=True, reduce_fx=fx))])
    with pytest.raises(ValueError, match=r"self\.log\('t', reduce_fx=.*log a torchmetrics Metric instead"):
        quiet(tmp_path).fit(module, loader(ten(), batch_size=4))


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (dict(enable_graph=True), r"enable_graph=True"),
        (dict(sync_dist_group=object()), r"sync_dist_group=\.\.\."),
        (dict(rank_zero_only=True, sync_dist=True), r"rank_zero_only=True and sync_dist=True"),
        (dict(on_step=False, on_epoch=False), r"on_step=False, on_epoch=False\)` is not useful"),
    ],
)
def test_options_that_differ_are_refused_naming_them(tmp_path: Path, option: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        quiet(tmp_path).fit(Logs(train=[("t", "idx", option)]), loader(ten(), batch_size=4))


def test_logger_false_keeps_a_value_from_loggers_only(tmp_path: Path) -> None:
    mem = Memory()
    fit = quiet(tmp_path, logger=mem, log_every_n_steps=1)
    fit.fit(Logs(train=[("h", "idx", dict(logger=False)), ("s", "idx", {})]), loader(ten(), batch_size=4))
    assert "h" not in mem.names() and "h" not in fit.logged_metrics and fit.callback_metrics["h"].item() == 3.0
    assert mem.values("s")[-1] == (2, 3.0)


def test_batch_size_weights_the_epoch_mean(tmp_path: Path) -> None:
    weights = {0: 1, 1: 3}

    class Weighted(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("w", float(batch_idx), on_epoch=True, on_step=False, batch_size=weights[batch_idx])
            return super().training_step(batch, batch_idx)

    fit = quiet(tmp_path)
    fit.fit(Weighted(), loader(ten(), batch_size=5))
    assert fit.callback_metrics["w"].item() == pytest.approx((0 * 1 + 1 * 3) / 4)


def test_validation_step_values_reach_the_loggers_at_the_batches_seen(tmp_path: Path) -> None:
    """Lightning writes ``on_step=True`` evaluation values per batch, at the step of the loader's batches seen
    since its loaders were set up (a fit's validations count on: 0, 1, 2, then 3, 4, 5), not while sanity
    checking. The epoch value goes at Lightning's logger step: the batches stepped before the batch whose
    end ran the validation."""
    mem = Memory()
    fit = quiet(tmp_path, max_epochs=2, logger=mem, num_sanity_val_steps=2)
    module = Logs(val=[("v", "idx", dict(on_step=True, on_epoch=True))])
    fit.fit(module, loader(ten(), batch_size=4), loader(ten(), batch_size=4))
    assert mem.values("v_step") == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 1.0), (4, 2.0), (5, 3.0)]
    assert all("epoch" not in row for _, row in mem.rows if "v_step" in row)  # Lightning's rows: no epoch
    assert mem.values("v_epoch") == [(2, pytest.approx(1.8)), (5, pytest.approx(1.8))]  # Lightning's steps
    assert fit.validate(module, loader(ten(), batch_size=4), verbose=False)[0]["v_epoch"] == pytest.approx(1.8)
    assert mem.values("v_step")[-3:] == [(0, 1.0), (1, 2.0), (2, 3.0)]


def test_log_dict_takes_lightnings_keywords(tmp_path: Path) -> None:
    class LogsADict(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log_dict(dictionary={"a": loss, "b": 2.0}, prog_bar=True, on_step=False, on_epoch=True)
            return loss

    fit = quiet(tmp_path, max_epochs=1)
    fit.fit(LogsADict(), loader(regression_data(16), batch_size=4))
    assert set(fit.progress_bar_metrics) == {"a", "b"} and fit.progress_bar_metrics["b"] == 2.0


def test_a_metric_logged_per_step_is_reset_once_per_epoch(tmp_path: Path) -> None:
    """A torchmetrics Metric logged on_step only (training_step's default) starts each epoch afresh: one reset at the
    epoch's end, although the epoch's values are reduced before on_train_epoch_end and again after it."""
    from torchmetrics.classification import BinaryAccuracy

    resets: list[int] = []

    class Counted(BinaryAccuracy):
        def reset(self) -> None:
            resets.append(1)
            super().reset()

    class Stepped(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.acc = Counted()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            n = len(batch[0])
            self.acc(torch.rand(n), torch.randint(0, 2, (n,)))
            resets.clear()  # forward resets the metric: count only the epoch-end resets
            self.log("acc", self.acc)
            return super().training_step(batch, batch_idx)

    quiet(tmp_path, max_epochs=1).fit(Stepped(), loader(regression_data(16), batch_size=8))
    assert len(resets) == 1
