"""``Trainer(cuda_graph=True)`` on a CUDA GPU: a captured run gives the eager run's parameters and logged values
bitwise (fp32 and bf16-mixed, an LR scheduler, clipping by norm and by value, accumulation, Adam and SGD),
resumes exactly, replays without waiting on the device, falls back with a warning naming the line of a
host read, runs a partial last batch eagerly and counts it. Every test skips without CUDA (conftest).
``tests/test_graph_step.py`` runs the same bookkeeping on the CPU with a fake backend."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import BatchValues as Values
from tests.models import LoggedRegressor, assert_bitwise_equal, every_step_checkpoints, params, regression_data
from tests.test_cuda import SyncWatch, gpu
from tests.test_cuda_graph_safety import SGD_BOUND
from trainer.graphs.captured import WARM_UP
from trainer.graphs.summary import GraphSummary

pytestmark = pytest.mark.cuda


class Net(LoggedRegressor):
    """``LoggedRegressor`` with Adam or SGD as the captured run makes them (``capturable``, ``fused``), so the
    eager run steps the same optimizer."""

    def __init__(self, optimizer: str = "adam", dropout: float = 0.0) -> None:
        super().__init__(dropout=dropout)
        self.optimizer = optimizer

    def configure_optimizers(self) -> Any:
        if self.optimizer == "sgd":  # the trainer makes SGD fused under cuda_graph: the eager run is given the same
            return self.scheduled(torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, fused=True))
        return self.scheduled(torch.optim.Adam(self.parameters(), lr=0.01, capturable=True))


def data(n: int = 96, batch: int = 8, shuffle: bool = False) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(regression_data(n), batch_size=batch, shuffle=shuffle, pin_memory=True)


def run(
    tmp_path: Path, graph: bool, make: Callable[[], trainer.Module] = Net, loader: Any = None, **flags: Any
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]], trainer.Trainer]:
    """A 2-epoch fit, eager or captured, of the module ``make`` builds after seeding; returns its parameters,
    every batch's values and the Trainer."""
    torch.manual_seed(0)
    module = make()
    values = Values()
    callbacks = [values, *flags.pop("callbacks", [])]
    fit = gpu(tmp_path / ("graph" if graph else "eager"), cuda_graph=graph, max_epochs=2, callbacks=callbacks, **flags)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*capturable=True.*")  # torch's note on the eager run
        fit.fit(module, loader or data())
    return [p.cpu() for p in params(module)], values.seen, fit


def summary(fit: trainer.Trainer) -> GraphSummary:
    captured = fit.fit_loop.captured
    assert captured is not None
    return captured.summary


def assert_same_values(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert len(a) == len(b) and [sorted(x) for x in a] == [sorted(y) for y in b]
    for step, (x, y) in enumerate(zip(a, b)):
        for key in x:
            assert torch.equal(x[key], y[key]), f"batch {step} {key}: {x[key]} != {y[key]}"


# ---- bitwise equal to the eager run ---------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize(("clip", "algorithm"), [(0.5, "norm"), (0.05, "value")])
@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_captured_run_is_bitwise_equal_to_the_eager_run(
    tmp_path: Path, precision: str, clip: float, algorithm: str, accumulate: int
) -> None:
    flags = dict(precision=precision, gradient_clip_val=clip, gradient_clip_algorithm=algorithm)
    eager, eager_values, _ = run(tmp_path, False, accumulate_grad_batches=accumulate, **flags)
    captured, captured_values, fit = run(tmp_path, True, accumulate_grad_batches=accumulate, **flags)
    assert_bitwise_equal(captured, eager)
    assert_same_values(captured_values, eager_values)
    assert len({float(v["out/loss"]) for v in captured_values}) == len(captured_values)  # not frozen at capture
    done = summary(fit)
    # one kind of step without accumulation; with 3, a window's first, middle and last batch are three kinds
    kinds = 1 if accumulate == 1 else 3
    expected = (24 - kinds * (WARM_UP + 1), kinds, {"warming up": kinds * WARM_UP})
    assert (done.replayed, done.captured, dict(done.eager)) == expected, done.text()
    assert done.fallback is None


def test_sgd_with_momentum_is_captured_through_its_fused_kernel(tmp_path: Path) -> None:
    """Within docs/cuda-graphs.md's bound, not bitwise: the fused kernel reads the device learning rate as float32
    (0.05 is not a float32), where the eager step passes a double (tests/test_cuda_graph_safety.py)."""
    eager, _, _ = run(tmp_path, False, lambda: Net("sgd"))
    captured, _, fit = run(tmp_path, True, lambda: Net("sgd"))
    for x, y in zip(captured, eager):
        assert (x - y).abs().max() <= SGD_BOUND * max(1.0, float(y.abs().max())), (x - y).abs().max()
    assert summary(fit).replayed == 24 - WARM_UP - 1


def test_dropout_draws_under_replay_what_the_eager_step_draws(tmp_path: Path) -> None:
    eager, _, _ = run(tmp_path, False, lambda: Net(dropout=0.3))
    captured, _, fit = run(tmp_path, True, lambda: Net(dropout=0.3))
    assert_bitwise_equal(captured, eager)
    assert summary(fit).replayed == 24 - WARM_UP - 1


# ---- a partial last batch, Python that runs once -------------------------------------------------------
class Counting(Net):
    def __init__(self) -> None:
        super().__init__()
        self.python_runs = 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.python_runs += 1  # a Python side effect: runs in eager steps and at capture, not in replays
        return super().training_step(batch, batch_idx)


def test_a_partial_last_batch_runs_eagerly_and_is_counted(tmp_path: Path) -> None:
    loader = data(n=8 * 10 + 3)  # 11 batches, the last of 3 samples
    eager, eager_values, _ = run(tmp_path, False, Counting, loader=loader)
    modules: list[Counting] = []

    def make() -> Counting:
        modules.append(Counting())
        return modules[-1]

    captured, captured_values, fit = run(tmp_path, True, make, loader=data(n=8 * 10 + 3))
    module = modules[0]
    assert_bitwise_equal(captured, eager)
    assert_same_values(captured_values, eager_values)
    done = summary(fit)
    assert (done.replayed, done.captured, dict(done.eager)) == (
        22 - WARM_UP - 1 - 2,
        1,
        {"warming up": WARM_UP, "rare": 2},
    ), done.text()
    assert module.python_runs == WARM_UP + 1 + 2  # warm-up, the capture, the two partial batches


# ---- exact resume ------------------------------------------------------------------------------------------
def resume_run(root: Path, ckpt: Path | None = None) -> tuple[list[torch.Tensor], int]:
    torch.manual_seed(0)
    module = Net()
    every_step = every_step_checkpoints(root / "ckpts")
    fit = gpu(root, max_epochs=2, cuda_graph=True, callbacks=[every_step], enable_checkpointing=True)
    fit.fit(module, data(n=56, shuffle=True), ckpt_path=ckpt)
    return [p.cpu() for p in params(module)], fit.global_step


def test_a_resumed_captured_run_captures_again_and_is_bitwise_equal(tmp_path: Path) -> None:
    final, steps = resume_run(tmp_path / "full")
    for step in (5, 9):  # after the capture in the first epoch, and inside the second
        resumed, resumed_steps = resume_run(tmp_path / f"r{step}", tmp_path / "full" / "ckpts" / f"step{step}.ckpt")
        assert resumed_steps == steps
        assert_bitwise_equal(resumed, final)
    saved = torch.load(tmp_path / "full" / "ckpts" / "step5.ckpt", weights_only=True, map_location="cpu")
    group = saved["optimizer_states"][0]["param_groups"][0]
    assert group["capturable"] is True and isinstance(group["lr"], float)  # the user's Adam(capturable=True)


def test_a_checkpoint_of_a_captured_run_holds_the_users_optimizer_settings(tmp_path: Path) -> None:
    class Plain(Net):
        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    every = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=6, save_top_k=-1)
    run(tmp_path, True, Plain, callbacks=[every], enable_checkpointing=True)
    ckpt = sorted((tmp_path / "ckpts").glob("*step=12.ckpt"))[0]  # written between replays
    state = torch.load(ckpt, weights_only=True, map_location="cpu")["optimizer_states"][0]
    assert state["param_groups"][0]["capturable"] is False
    assert {s["step"].device.type for s in state["state"].values()} == {"cpu"}  # where eager Adam keeps it


# ---- no waiting on the device, and what cannot be captured --------------------------------------------------
class ReplayWatch(SyncWatch):
    """``SyncWatch`` over replays only: batches [6, 11), after the warm-up and the capture."""

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 6:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        elif batch_idx == 11:
            self.stop()


def test_replayed_steps_never_synchronize(tmp_path: Path) -> None:
    """With a logger, the bar and checkpointing on, and pinned batches copied straight into the graph's inputs."""
    assert WARM_UP + 1 < 6
    watch = ReplayWatch()
    fit = gpu(tmp_path, cuda_graph=True, logger=True, enable_checkpointing=True, enable_progress_bar=True,
              log_every_n_steps=50, callbacks=[watch])  # fmt: skip
    try:
        fit.fit(Net(), data())
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert summary(fit).replayed == 12 - WARM_UP - 1


class HostRead(Net):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        if self.how == "item":
            self.last = out["loss"].item()
        elif self.how == "print":
            print(out["loss"])
        elif out["loss"] > 1e9:  # data-dependent control flow
            out["loss"] = out["loss"] * 0
        return out


@pytest.mark.parametrize("how", ["item", "print", "branch"])
def test_a_host_read_in_the_step_falls_back_with_a_warning_naming_its_line(tmp_path: Path, how: str) -> None:
    eager, _, _ = run(tmp_path, False, lambda: HostRead(how))
    with pytest.warns(UserWarning, match=r"the training step cannot be captured: it waits on the device at "
                      r".*test_cuda_graph\.py:\d+ .*The run continues eagerly") as caught:  # fmt: skip
        captured, _, fit = run(tmp_path, True, lambda: HostRead(how))
    line = {"item": "self.last = out", "print": "print(out", "branch": "elif out"}[how]
    assert any(line in str(w.message) for w in caught)
    assert_bitwise_equal(captured, eager)
    done = summary(fit)
    assert done.replayed == 0 and done.captured == 0 and done.fallback is not None


class NaNInData(Net):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return super().training_step((x, y * (1 + x[0, 0] * 0 + torch.where(x[0, 0] > 1e3, torch.nan, 0.0))), 0)


def test_a_nonfinite_loss_in_a_replayed_step_is_still_caught_naming_its_step(tmp_path: Path) -> None:
    dataset = regression_data(96)
    dataset.tensors[0][8 * 7] = 1e4  # batch 7, a replay: its loss is NaN
    loader = torch.utils.data.DataLoader(dataset, batch_size=8)
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(nan\) at epoch 0, global step 7;"):
        gpu(tmp_path, cuda_graph=True, log_every_n_steps=50).fit(NaNInData(), loader)
