"""``Trainer(cuda_graph=True)`` on a GPU, on what its first GPU must show: a capture that fails while the step has
dropout leaves a process whose eager step runs on (50 steps, ``empty_cache()`` after each, an allocation that
needs the cache released) and ends bitwise where the eager run ends; 20 unfreezes hold no more memory than one;
a pinned batch is copied once, by the graph's own mover; AdamW with weight decay is bitwise the eager step, and
SGD's fused kernel within the bound docs/cuda-graphs.md gives; the module's own generator draws afresh in each
replay; host reads on the first warm-up step and in a backward hook are found before the capture, naming their
lines. Every test skips without CUDA (conftest). Their CPU counterparts: ``tests/test_graph_safety.py``,
``tests/test_graph_capture_fails.py``, ``tests/test_graph_optimizers.py``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
import trainer.move
from tests.models import LoggedRegressor, assert_bitwise_equal, params, regression_data
from tests.test_cuda import gpu
from trainer.graphs.captured import WARM_UP
from trainer.graphs.summary import GraphSummary

pytestmark = pytest.mark.cuda
SGD_BOUND = 1e-4  # relative: SGD's fused kernel reads the device learning rate as float32 (docs/cuda-graphs.md)


class Net(LoggedRegressor):
    """An optimizer per test, built as the captured run makes it (``capturable``, ``fused``): the eager run steps
    the same optimizer."""

    def __init__(self, make: Callable[[Any], torch.optim.Optimizer] | None = None, dropout: float = 0.0) -> None:
        super().__init__(dropout=dropout)
        self.make = make

    def configure_optimizers(self) -> Any:
        if self.make is None:
            return self.scheduled(torch.optim.Adam(self.parameters(), lr=0.01, capturable=True))
        return self.make(self.parameters())


def data(n: int = 96) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(regression_data(n), batch_size=8, pin_memory=True)


def run(
    tmp_path: Path, graph: bool, make: Callable[[], trainer.Module], loader: Any = None, **flags: Any
) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = make()
    fit = gpu(tmp_path / ("graph" if graph else "eager"), cuda_graph=graph, max_epochs=flags.pop("max_epochs", 2),
              **flags)  # fmt: skip
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*capturable=True.*")  # torch's note on the eager run
        fit.fit(module, loader or data())
    return [p.cpu() for p in params(module)], fit


def summary(fit: trainer.Trainer) -> GraphSummary:
    assert fit.fit_loop.captured is not None
    return fit.fit_loop.captured.summary


# ---- a capture that fails leaves a process the eager step runs on ---------------------------------------
class FailsWhileCaptured(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        if torch.cuda.is_current_stream_capturing():
            out["loss"].item()  # refused while capturing: the capture is spoiled and capture_end raises
        return out


class Pressure(trainer.Callback):
    """``empty_cache()`` after every batch; at one batch an allocation that fits only once the cache is released."""

    def __init__(self) -> None:
        self.retried = False

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        torch.cuda.empty_cache()  # torch's internal assert, were the failed capture still allocating to its pool
        if batch_idx != WARM_UP + 10:
            return
        gib = 2**30
        held = torch.empty(gib, dtype=torch.uint8, device="cuda")
        del held  # cached
        retries = torch.cuda.memory_stats()["num_alloc_retries"]
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + gib // 2) / total)
        try:
            bigger = torch.empty(gib + gib // 4, dtype=torch.uint8, device="cuda")
            del bigger
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        self.retried = torch.cuda.memory_stats()["num_alloc_retries"] > retries


def test_a_capture_that_fails_leaves_a_process_whose_eager_step_runs_on(tmp_path: Path) -> None:
    loader = data(8 * (WARM_UP + 1 + 50))  # the warm-up, the failed capture, 50 eager steps after it
    eager, _ = run(tmp_path, False, lambda: FailsWhileCaptured(dropout=0.3), loader, max_epochs=1)
    pressure = Pressure()
    with pytest.warns(UserWarning, match=r"capturing it failed at .*test_cuda_graph_safety\.py:\d+"):
        captured, fit = run(tmp_path, True, lambda: FailsWhileCaptured(dropout=0.3), data(8 * (WARM_UP + 51)),
                            max_epochs=1, callbacks=[pressure])  # fmt: skip
    assert_bitwise_equal(captured, eager)  # the dropout masks drawn after the failure are the eager run's
    assert pressure.retried
    done = summary(fit)
    assert done.captured == 0 and done.eager["after the fallback"] == 51 and done.fallback is not None


# ---- dropped graphs free their memory -------------------------------------------------------------------
class Unfreezes(trainer.Callback):
    def __init__(self) -> None:
        self.allocated: list[int] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        module.net[0].weight.requires_grad_(trainer.current_epoch % 2 == 0)
        torch.cuda.synchronize()
        self.allocated.append(torch.cuda.memory_allocated())


def test_20_unfreezes_hold_no_more_memory_than_one(tmp_path: Path) -> None:
    watch = Unfreezes()
    _, fit = run(tmp_path, True, Net, data(8 * (WARM_UP + 2)), max_epochs=21, callbacks=[watch])
    assert len(summary(fit).dropped) == 20
    assert max(watch.allocated[3:]) <= max(watch.allocated[1:3]), watch.allocated


# ---- one copy of each batch ---------------------------------------------------------------------------------
def test_a_pinned_batch_goes_straight_into_the_graphs_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eager, _ = run(tmp_path, False, Net)
    moved: list[int] = []
    move = trainer.move._move
    monkeypatch.setattr(trainer.move, "_move", lambda obj, device: moved.append(1) or move(obj, device))
    captured, fit = run(tmp_path, True, Net)
    assert_bitwise_equal(captured, eager)
    assert moved == [] and summary(fit).replayed == 24 - WARM_UP - 1  # the strategy's .to() never ran


# ---- weight decay ------------------------------------------------------------------------------------------
LR, DECAY = 0.01286, 0.1  # float32(1 - LR * DECAY) differs from 1 - float32(LR) * DECAY in float32


def test_adamw_with_weight_decay_is_bitwise_the_eager_step(tmp_path: Path) -> None:
    def make() -> Net:
        return Net(lambda p: torch.optim.AdamW(p, lr=LR, weight_decay=DECAY, capturable=True))

    eager, _ = run(tmp_path, False, make)
    captured, fit = run(tmp_path, True, make)
    assert_bitwise_equal(captured, eager)
    assert summary(fit).replayed == 24 - WARM_UP - 1


@pytest.mark.parametrize("lr", [2**-4, 0.05])
def test_sgd_with_momentum_and_weight_decay_within_the_documented_bound(tmp_path: Path, lr: float) -> None:
    def make() -> Net:
        return Net(lambda p: torch.optim.SGD(p, lr=lr, momentum=0.9, weight_decay=0.01, fused=True))

    eager, _ = run(tmp_path, False, make)
    captured, fit = run(tmp_path, True, make)
    assert summary(fit).replayed == 24 - WARM_UP - 1
    if lr == 2**-4:  # float32 holds it exactly: the fused kernel's float32 read changes nothing
        assert_bitwise_equal(captured, eager)
    for x, y in zip(captured, eager):
        assert (x - y).abs().max() <= SGD_BOUND * max(1.0, float(y.abs().max())), (x - y).abs().max()


# ---- the module's own generator -----------------------------------------------------------------------------
class OwnGenerator(Net):
    def __init__(self) -> None:
        super().__init__()
        self.noise = torch.Generator(device="cuda").manual_seed(1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        noisy = x + 0.01 * torch.randn(x.shape, generator=self.noise, device=x.device)
        return super().training_step((noisy, y), batch_idx)


def test_the_modules_own_generator_draws_afresh_in_each_replay(tmp_path: Path) -> None:
    eager, _ = run(tmp_path, False, OwnGenerator)
    captured, fit = run(tmp_path, True, OwnGenerator)
    assert_bitwise_equal(captured, eager)
    assert summary(fit).replayed == 24 - WARM_UP - 1


# ---- host reads found before the capture -------------------------------------------------------------------
class ReadsOnTheFirstStep(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        if batch_idx % WARM_UP == 0:
            self.seen = float(out["loss"])  # the first warm-up step's read
        return out


class ReadsInABackwardHook(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        out["loss"].register_hook(self.look)
        return out

    def look(self, grad: torch.Tensor) -> None:
        self.seen = grad.item()  # runs on autograd's device thread


@pytest.mark.parametrize(("make", "line"), [(ReadsOnTheFirstStep, "self.seen = float("), (ReadsInABackwardHook,
                         "self.seen = grad.item()")])  # fmt: skip
def test_a_host_read_is_found_before_the_capture_naming_its_line(
    tmp_path: Path, make: Callable[[], Net], line: str
) -> None:
    eager, _ = run(tmp_path, False, make)
    with pytest.warns(UserWarning, match=r"it waits on the device at .*test_cuda_graph_safety\.py:\d+") as caught:
        captured, fit = run(tmp_path, True, make)
    assert any(line in str(w.message) for w in caught)
    assert_bitwise_equal(captured, eager)
    assert summary(fit).captured == 0
