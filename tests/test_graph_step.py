"""The captured step's bookkeeping through the Trainer, on the CPU with a fake backend (``tests/fake_graphs.py``):
which batches warm up, are captured, replayed or run eagerly, and why; the log calls a capture records and
every replay makes again; the fallback with its warning; the bounded cache; graphs dropped when what trains
changes; resume. The fake's replay re-runs the step, so the arithmetic is the eager step's: what is checked
here is everything around it. ``tests/test_cuda_graph.py`` checks the arithmetic of real graphs on a GPU."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
import trainer.graphs.captured as captured
from tests import models
from tests.fake_graphs import use_fake_graphs
from trainer.graphs.captured import WARM_UP
from trainer.graphs.summary import FULL, RARE, WARMING, WINDOW, GraphSummary

Net, Values = models.LoggedRegressor, models.BatchValues


def fit(
    tmp_path: Path, graph: bool, make: Callable[[], trainer.Module] = Net, data: Any = None, **flags: Any
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]], trainer.Trainer]:
    """A fit, eager or captured, of the module ``make`` builds after seeding; its parameters, every batch's
    callback metrics and outputs, and the Trainer."""
    torch.manual_seed(0)
    module = make()
    values = Values()
    flags = {"max_epochs": 2, **flags, "callbacks": [values, *flags.get("callbacks", [])]}
    run = models.quiet(tmp_path / ("graph" if graph else "eager"), cuda_graph=graph, **flags)
    run.fit(module, data if data is not None else models.loader(models.regression_data(96)))
    return models.params(module), values.seen, run


def summary(run: trainer.Trainer) -> GraphSummary:
    assert run.fit_loop.captured is not None
    return run.fit_loop.captured.summary


def assert_same_values(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert [sorted(x) for x in a] == [sorted(y) for y in b]
    for step, (x, y) in enumerate(zip(a, b)):
        for key in x:
            assert torch.equal(x[key], y[key]), f"batch {step} {key}: {x[key]} != {y[key]}"


@pytest.mark.parametrize("accumulate", [1, 3])
def test_replays_log_what_the_eager_step_logs_and_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], accumulate: int
) -> None:
    eager, eager_values, _ = fit(tmp_path, False, accumulate_grad_batches=accumulate, gradient_clip_val=0.5)
    backends = use_fake_graphs(monkeypatch)
    params, values, run = fit(tmp_path, True, accumulate_grad_batches=accumulate, gradient_clip_val=0.5)
    models.assert_bitwise_equal(params, eager)
    assert_same_values(values, eager_values)
    kinds = 1 if accumulate == 1 else 3  # a window's first, middle and last batch capture different things
    done = summary(run)
    assert (done.replayed, done.captured, dict(done.eager)) == (
        24 - kinds * (WARM_UP + 1),
        kinds,
        {WARMING: kinds * WARM_UP},
    )
    calls = backends[0].calls
    assert calls[:1] == ["prepare"] and calls.count("capture") == kinds and calls[-1] == "release"
    first_capture = calls.index("capture")
    assert calls[1:first_capture] == ["warm_up"] * (first_capture - 1) and "replay" not in calls[:first_capture]
    printed = capsys.readouterr().out
    assert f"steadytrain: cuda_graph: of 24 training batches, {done.replayed} replayed a captured graph" in printed


def test_a_partial_last_batch_runs_eagerly_and_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = models.loader(models.regression_data(8 * 10 + 3))
    eager, eager_values, _ = fit(tmp_path, False, data=data)
    use_fake_graphs(monkeypatch)
    params, values, run = fit(tmp_path, True, data=data)
    models.assert_bitwise_equal(params, eager)
    assert_same_values(values, eager_values)
    done = summary(run)
    assert (done.replayed, done.captured, dict(done.eager)) == (16, 1, {WARMING: WARM_UP, RARE: 2})
    assert "2 of a kind seen fewer than 3 times (e.g. a partial last batch)" in done.text()


def test_a_full_cache_runs_the_other_kinds_eagerly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "MAX_GRAPHS", 1)
    use_fake_graphs(monkeypatch)
    _, _, run = fit(tmp_path, True, data=models.loader(models.regression_data(8 * 10 + 3)))
    assert dict(summary(run).eager) == {WARMING: WARM_UP, FULL: 2}


# ---- what cannot be captured: a warning naming the line, then the eager step ---------------------------
class ReadsLoss(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        self.seen = float(out["loss"].detach())  # a host read: on a GPU it waits for the device
        return out


def test_a_host_read_falls_back_with_a_warning_naming_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eager, eager_values, _ = fit(tmp_path, False, ReadsLoss)
    use_fake_graphs(monkeypatch)
    where = (
        re.escape("test_graph_step.py:")
        + r"\d+ "
        + re.escape('(self.seen = float(out["loss"].detach())  # a host read')
    )
    with pytest.warns(
        UserWarning, match=f"the training step cannot be captured: it waits on the device at .*{where}"
    ) as caught:
        params, values, run = fit(tmp_path, True, ReadsLoss)
    assert len([w for w in caught if "cannot be captured" in str(w.message)]) == 1
    models.assert_bitwise_equal(params, eager)
    assert_same_values(values, eager_values)
    done = summary(run)
    # every warm-up step is watched: the first finds a read in the user's code
    assert (done.replayed, done.captured, dict(done.eager)) == (0, 0, {WARMING: 1, "after the fallback": 23})


class IllegalInCapture(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        captured = self.trainer.fit_loop.captured
        if captured is not None and captured.backend.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")  # as a CUDA op would
        return super().training_step(batch, batch_idx)


def test_a_failed_capture_runs_the_batch_eagerly_and_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eager, eager_values, _ = fit(tmp_path, False, IllegalInCapture)
    use_fake_graphs(monkeypatch)
    with pytest.warns(UserWarning, match=r"capturing it failed at .*test_graph_step\.py:\d+ \(raise RuntimeError.*"
                      r"RuntimeError: operation not permitted when stream is capturing"):  # fmt: skip
        params, values, run = fit(tmp_path, True, IllegalInCapture)
    models.assert_bitwise_equal(params, eager)  # the failed capture's batch ran once, eagerly
    assert_same_values(values, eager_values)
    assert dict(summary(run).eager) == {WARMING: WARM_UP, "after the fallback": 24 - WARM_UP}


class SetsItsLearningRate(Net):
    def on_before_optimizer_step(self, optimizer: Any) -> None:
        optimizer.param_groups[0]["lr"] = 0.01 / (self.trainer.global_step + 1)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def test_a_learning_rate_assigned_in_the_step_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_graphs(monkeypatch, device_lr=True)
    with pytest.warns(UserWarning, match=r"the step assigns param_groups\[0\]\['lr'\] itself"):
        _, _, run = fit(tmp_path, True, SetsItsLearningRate)
    assert summary(run).captured == 0
    assert run.optimizers[0].param_groups[0]["lr"] == 0.01 / 24  # what the step set was kept, every step


class LogsAMetric(Net):
    def __init__(self) -> None:
        import torchmetrics

        super().__init__()
        self.metric = torchmetrics.MeanMetric()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("metric", self.metric)
        return super().training_step(batch, batch_idx)


def test_a_metric_logged_inside_the_step_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_graphs(monkeypatch)
    with pytest.warns(UserWarning, match=r"self\.log\('metric', <MeanMetric>\) inside the step: a torchmetrics Metric"):
        _, _, run = fit(tmp_path, True, LogsAMetric)
    assert summary(run).captured == 0


# ---- accumulation windows, what trains, resume -------------------------------------------------------
def test_a_window_begun_eagerly_stays_eager_to_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first window's kinds are captured, a window whose first batch is of a new shape (warming up)
    runs its other batches eagerly too, accumulating into the same gradients."""
    data = models.regression_data(8 * 15)
    batches = [(data.tensors[0][i : i + 8], data.tensors[1][i : i + 8]) for i in range(0, 8 * 15, 8)]
    batches[12] = (batches[12][0][:5], batches[12][1][:5])  # window 4's first batch: another shape
    eager, eager_values, _ = fit(tmp_path, False, data=batches, accumulate_grad_batches=3, max_epochs=1)
    use_fake_graphs(monkeypatch)
    params, values, run = fit(tmp_path, True, data=batches, accumulate_grad_batches=3, max_epochs=1)
    models.assert_bitwise_equal(params, eager)
    assert_same_values(values, eager_values)
    done = summary(run)
    assert done.eager[WINDOW] == 2 and done.captured == 3 and done.replayed == 0, done.text()


class FreezesAtEpoch1(trainer.Callback):
    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == 1:
            module.net[0].weight.requires_grad_(False)


def test_graphs_are_dropped_and_captured_again_when_what_trains_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, _, _ = fit(tmp_path, False, callbacks=[FreezesAtEpoch1()])
    use_fake_graphs(monkeypatch)
    params, _, run = fit(tmp_path, True, callbacks=[FreezesAtEpoch1()])
    models.assert_bitwise_equal(params, eager)
    done = summary(run)
    assert done.dropped == ["what trains changed (requires_grad or the optimizer's parameters)"]
    assert (done.captured, dict(done.eager)) == (2, {WARMING: 2 * WARM_UP}), done.text()


def test_a_resumed_captured_run_captures_again_and_ends_as_the_uninterrupted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backends = use_fake_graphs(monkeypatch)
    every = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=1, save_top_k=-1)
    final, _, _ = fit(tmp_path / "full", True, accumulate_grad_batches=2, callbacks=[every], enable_checkpointing=True)
    ckpt = tmp_path / "ckpts" / "epoch=0-step=5.ckpt"  # after the capture, in the window's middle (batch 10 of 12)
    torch.manual_seed(0)
    module = Net()
    run = models.quiet(tmp_path / "resumed", cuda_graph=True, max_epochs=2, accumulate_grad_batches=2)
    run.fit(module, models.loader(models.regression_data(96)), ckpt_path=ckpt)
    models.assert_bitwise_equal(models.params(module), final)
    assert backends[-1].calls.count("capture") == 2 and summary(run).replayed > 0


class Pair:
    """A batch class of the user's own, moved with ``.to()``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def to(self, device: Any) -> Pair:
        return self


class PairNet(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return super().training_step((batch.x, batch.y), batch_idx)


def test_a_batch_of_a_class_of_ones_own_runs_eagerly_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = models.regression_data(48)
    pairs = [Pair(data.tensors[0][i : i + 8], data.tensors[1][i : i + 8]) for i in range(0, 48, 8)]
    batches = torch.utils.data.DataLoader(pairs, batch_size=None)  # one loader of Pair batches (a list is several)
    use_fake_graphs(monkeypatch)
    _, _, run = fit(tmp_path, True, PairNet, data=batches, max_epochs=1)
    assert dict(summary(run).eager) == {"where the batch holds a Pair: moved with .to(), but not a tensor": 6}
