"""The GPU step's semantics, checked on CPU: the deferred non-finite check, the scaler's skipped step
told on the device, the module and optimizer state offloaded after each stage, the out-of-memory
error. ``tests/test_cuda.py`` checks the same on a real GPU (no synchronization, CPU after fit)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests import models
from tests.test_errors import OffCpu
from trainer.callbacks import ModelCheckpoint
from trainer.loops.nonfinite import CHUNK, DeferredNonfinite
from trainer.precision.amp import MixedPrecision
from trainer.strategies.base import optimizer_state_to
from trainer.strategies.single import SingleDeviceStrategy


class NaNAt(models.Regressor):
    """The loss is NaN from global step ``bad`` on; records the steps that ran. ``off_cpu``: the loss
    says it is not on the CPU, so the check takes the accelerator's deferred path."""

    def __init__(self, bad: int, off_cpu: bool = True) -> None:
        super().__init__()
        self.bad = bad
        self.off_cpu = off_cpu
        self.ran: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.ran.append(self.trainer.global_step)
        loss = super().training_step(batch, batch_idx)
        loss = loss * float("nan") if self.trainer.global_step >= self.bad else loss
        return loss.as_subclass(OffCpu) if self.off_cpu else loss


def fit(tmp_path: Path, module: trainer.Module, batches: int = 12, **kwargs: Any) -> trainer.Trainer:
    t = models.quiet(tmp_path, max_epochs=1, **kwargs)
    t.fit(module, models.loader(models.regression_data(batches * 8)))
    return t


# ---- the deferred record --------------------------------------------------------------------------
def test_record_names_the_first_bad_step_across_chunks() -> None:
    record = DeferredNonfinite()
    for i in range(CHUNK * 3 + 5):  # two micro-batches per step: the index maps back to the step
        record.record(torch.tensor(float("inf") if i in (CHUNK + 3, CHUNK + 9) else 1.0), i // 2)
    assert record.read() == ((CHUNK + 3) // 2, math.inf)
    assert record.read() is None  # the read starts a new interval
    record.record(torch.tensor(2.0), 900)
    assert record.read() is None
    record.record(torch.tensor(float("nan")), 901)
    step, value = record.read() or (None, None)
    assert step == 901 and value is not None and math.isnan(value)


def test_deferred_check_raises_at_the_logging_interval_naming_the_bad_step(tmp_path: Path) -> None:
    module = NaNAt(bad=3)
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(nan\) at epoch 0, global step 3;"):
        fit(tmp_path, module, log_every_n_steps=8)
    assert module.ran == list(range(8))  # read after step 8 (the interval), not at step 3


def test_deferred_check_raises_at_the_epoch_end_at_the_latest(tmp_path: Path) -> None:
    module = NaNAt(bad=9)
    with pytest.raises(FloatingPointError, match=r"global step 9;"):
        fit(tmp_path, module, batches=11, log_every_n_steps=50)
    assert module.ran == list(range(11))


def test_no_checkpoint_is_written_with_nonfinite_weights(tmp_path: Path) -> None:
    module = NaNAt(bad=4)
    every_step = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    with pytest.raises(FloatingPointError, match=r"global step 4;"):
        fit(tmp_path, module, log_every_n_steps=50, callbacks=[every_step], enable_checkpointing=True)
    saved = sorted((tmp_path / "ckpt").glob("*.ckpt"))
    steps = sorted(torch.load(path, weights_only=False)["global_step"] for path in saved if path.name != "last.ckpt")
    assert steps == [1, 2, 3, 4]  # after steps 0..3; the one after the NaN step (4) was refused
    for path in saved:
        weights = torch.load(path, weights_only=False)["state_dict"]
        assert all(torch.isfinite(w).all() for w in weights.values()), path


def test_on_cpu_the_raise_comes_at_the_bad_step(tmp_path: Path) -> None:
    module = NaNAt(bad=3, off_cpu=False)
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(nan\) at epoch 0, global step 3;"):
        fit(tmp_path, module, log_every_n_steps=50)
    assert module.ran == [0, 1, 2, 3]


# ---- the scaler's skipped step, told without reading the scale back -------------------------------------
def test_amp_update_tells_a_skipped_step_without_reading_the_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    precision = MixedPrecision("16-mixed", "cpu")
    assert precision.scaler is not None
    monkeypatch.setattr(precision.scaler, "get_scale", lambda: pytest.fail("get_scale() reads the scale back"))
    net = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    outcomes = []
    for overflow in (False, True, False):
        optimizer.zero_grad()
        precision.backward(net(torch.ones(1, 2)).sum() * (float("inf") if overflow else 1.0))
        precision.optimizer_step(optimizer)
        stepped = precision.update()
        assert isinstance(stepped, torch.Tensor)  # on the device: the loop reads it only when it must
        outcomes.append(bool(stepped))
    assert outcomes == [True, False, True]


# ---- Lightning's teardown: module and optimizer state to the CPU ---------------------------------------
class Recording(SingleDeviceStrategy):
    def __init__(self) -> None:
        super().__init__()
        self.offloaded: list[int] = []

    def offload(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.offloaded.append(len(optimizers))
        super().offload(optimizers)


def test_every_stage_ends_by_offloading_module_and_optimizers(tmp_path: Path) -> None:
    strategy = Recording()
    t = models.quiet(tmp_path, max_epochs=1, strategy=strategy)
    module = models.Regressor(adam=True)
    data = models.loader(models.regression_data(16))
    t.fit(module, data, data)
    assert strategy.offloaded == [1]  # the fit's optimizer
    t.validate(module, data)
    assert strategy.offloaded == [1, 1]  # trainer.optimizers are still the fit's (on the CPU already)


def test_offload_moves_module_and_optimizer_state_off_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = SingleDeviceStrategy("meta")  # a stand-in accelerator: only its type is read
    strategy.module = module = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(module.parameters())
    calls: list[Any] = []
    monkeypatch.setattr(module, "cpu", lambda: calls.append("module.cpu") or module)
    monkeypatch.setattr(
        "trainer.strategies.base.optimizer_state_to", lambda opt, device: calls.append((opt, device.type))
    )
    strategy.offload([optimizer])
    assert calls == [(optimizer, "cpu"), "module.cpu"]
    SingleDeviceStrategy("cpu").offload([optimizer])  # on the CPU: nothing to move
    assert len(calls) == 2


def test_optimizer_state_moves_except_its_step_counter() -> None:
    net = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    optimizer_state_to(optimizer, torch.device("meta"))  # any device but the CPU shows the move
    for state in optimizer.state.values():
        assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
        assert state["step"].device.type == "cpu"  # torch wants it there unless capturable


# ---- out of memory in a step -----------------------------------------------------------------------
class OutOfMemoryAt(models.Regressor):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.at = step

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == self.at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return super().training_step(batch, batch_idx)


def test_out_of_memory_says_where_with_what_batch_and_leaves_checkpoints(tmp_path: Path) -> None:
    every_step = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        fit(tmp_path, OutOfMemoryAt(step=3), callbacks=[every_step], enable_checkpointing=True)
    message = str(caught.value)
    assert "out of memory in stage 'train' at epoch 0, global step 3" in message
    assert "batch: [(8, 8) float32, (8, 1) float32]" in message
    assert "device cpu: no CUDA memory figures" in message  # on a GPU: what the process holds and the card has
    assert "Tried to allocate 20.00 GiB" in message  # torch's own words are kept
    saved = {path.name: torch.load(path, weights_only=False)["global_step"] for path in (tmp_path / "ckpt").glob("*")}
    assert saved == {"epoch=0-step=1.ckpt": 1, "epoch=0-step=2.ckpt": 2, "epoch=0-step=3.ckpt": 3, "last.ckpt": 3}


# ---- the GPU benchmark's smoke run ------------------------------------------------------------------------
def test_the_gpu_benchmark_smoke_run_prints_its_rows_on_any_machine() -> None:
    """``benchmarks/gpu_step.py --quick`` runs where there is no GPU (the graph rows are n/a there)."""
    root = Path(__file__).resolve().parents[1]
    args = ["--quick", "--rounds", "1", "--only", "tiny", "--systems", "graph", "ours", "ours-graph"]
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "gpu_step.py"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("tiny/")]
    assert len(rows) == 4 and all(" raw " in row and " ours " in row for row in rows), out.stdout
    if not torch.cuda.is_available():
        assert all("graph n/a" in row and "ours-graph n/a" in row for row in rows), out.stdout
    assert "= ours/raw steady: tiny " in out.stdout
