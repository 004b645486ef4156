"""The captured step through the Trainer on the CPU fake (``tests/fake_graphs.py``), on what a first GPU would
show: a batch copied once into the graph's inputs, with the strategy's mover made anew per call as on CUDA;
dropped graphs that free their gradients; optimizer state made before the capture; host reads found on any
warm-up step, before the capture; the module's generators handed to the capture; a capture whose failure
cannot be undone ending the fit with a clear error. ``tests/test_cuda_graph_safety.py`` checks them on a GPU."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests import models
from tests.fake_graphs import use_fake_graphs
from tests.test_graph_step import assert_same_values, fit, summary
from trainer.graphs.captured import WARM_UP
from trainer.graphs.summary import WARMING
from trainer.strategies.single import SingleDeviceStrategy

Net = models.LoggedRegressor


# ---- one copy of each batch, decided by the mover's identity ---------------------------------------------
class CudaShapedStrategy(SingleDeviceStrategy):
    """On the CPU, but its ``batch_mover()`` is a new ``functools.partial`` at each call, as on a CUDA device."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.moved = 0

    def batch_mover(self) -> Any:
        return functools.partial(self._move, "cpu")

    def _move(self, device: str, batch: Any) -> Any:
        self.moved += 1
        return batch


def test_batches_go_from_the_loader_into_the_graphs_inputs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, eager_values, _ = fit(tmp_path, False, strategy=CudaShapedStrategy())
    use_fake_graphs(monkeypatch)
    strategy = CudaShapedStrategy()
    params, values, run = fit(tmp_path, True, strategy=strategy)
    models.assert_bitwise_equal(params, eager)
    assert_same_values(values, eager_values)
    assert strategy.moved == 0  # the captured run's own mover copied each batch into the static inputs
    assert summary(run).replayed == 24 - WARM_UP - 1


# ---- dropped graphs free their gradients -------------------------------------------------------------------
class Unfreezes(trainer.Callback):
    """Freezes and unfreezes the first layer at each epoch's start, as a fine-tuning schedule does."""

    def __init__(self, backends: list[Any]) -> None:
        self.backends = backends
        self.held: list[int] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        module.net[0].weight.requires_grad_(trainer.current_epoch % 2 == 0)
        self.held.append(self.backends[0].pool_bytes())


def test_graphs_dropped_over_20_unfreezes_hold_no_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backends = use_fake_graphs(monkeypatch)
    watch = Unfreezes(backends)
    data = models.loader(models.regression_data(8 * (WARM_UP + 2)))
    _, _, run = fit(tmp_path, True, data=data, max_epochs=21, callbacks=[watch])
    assert len(summary(run).dropped) == 20 and backends[0].calls.count("capture") == 21
    assert max(watch.held[2:]) <= max(watch.held[1:3])  # one capture's gradients at most, not one per drop
    assert backends[0].pool_bytes() <= max(watch.held[1:3])


# ---- optimizer state made before the capture ------------------------------------------------------------
class LateLayer(Net):
    """A layer that gets its first gradient at the capture (batch ``WARM_UP``): no Adam state before it."""

    def __init__(self) -> None:
        super().__init__()
        self.late = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        if batch_idx >= WARM_UP:  # Python: decided at the capture, replayed after, as the eager step does too
            out["loss"] = out["loss"] + 0.1 * self.late(batch[0]).pow(2).mean()
        return out


def test_optimizer_state_is_made_before_the_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eager, eager_values, _ = fit(tmp_path, False, LateLayer, max_epochs=1)
    use_fake_graphs(monkeypatch)
    params, values, run = fit(tmp_path, True, LateLayer, max_epochs=1)
    models.assert_bitwise_equal(params, eager)  # not reset to zero at each replay
    assert_same_values(values, eager_values)
    assert summary(run).replayed == 12 - WARM_UP - 1


# ---- host reads on any warm-up step, found before the capture ----------------------------------------------
class ReadsSometimes(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        if batch_idx % WARM_UP == 0:
            self.seen = float(out["loss"].detach())  # a read on some steps only: the first warm-up step's
        return out


def test_a_read_on_the_first_warm_up_step_is_found_before_the_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, _, _ = fit(tmp_path, False, ReadsSometimes)
    backends = use_fake_graphs(monkeypatch)
    where = re.escape("test_graph_safety.py:") + r"\d+ " + re.escape('(self.seen = float(out["loss"].detach())')
    with pytest.warns(UserWarning, match=f"cannot be captured: it waits on the device at .*{where}"):
        params, _, run = fit(tmp_path, True, ReadsSometimes)
    models.assert_bitwise_equal(params, eager)
    assert "capture" not in backends[0].calls  # found while warming up: never captured
    assert dict(summary(run).eager) == {WARMING: 1, "after the fallback": 23}


# ---- the module's own generators, and a failure the running torch cannot undo ------------------------------
class OwnGenerator(Net):
    def __init__(self) -> None:
        super().__init__()
        self.noise = torch.Generator().manual_seed(1)  # on the capture's device (the CPU here)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return super().training_step((x + 0.01 * torch.randn(x.shape, generator=self.noise), y), batch_idx)


def test_the_modules_own_generators_are_handed_to_the_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backends = use_fake_graphs(monkeypatch)
    module: list[OwnGenerator] = []
    fit(tmp_path, True, lambda: module.append(OwnGenerator()) or module[-1], max_epochs=1)
    assert backends[0].generators == [[module[0].noise]]


class IllegalInCapture(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        captured = self.trainer.fit_loop.captured
        if captured is not None and captured.backend.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")  # as a CUDA op would
        return super().training_step(batch, batch_idx)


def test_a_capture_that_cannot_be_undone_ends_the_fit_naming_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_fake_graphs(monkeypatch, unsafe=True)
    message = (
        r"cuda_graph=True: capturing it failed at .*test_graph_safety\.py:\d+ \(raise RuntimeError.*operation not "
        r"permitted when stream is capturing; and this torch cannot undo .* Fix that line, or set cuda_graph=False"
    )
    with pytest.raises(RuntimeError, match=message):
        fit(tmp_path, True, IllegalInCapture)
