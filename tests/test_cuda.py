"""On a CUDA GPU: AMP bitwise against a raw loop, exact resume, a step that never waits on the device,
the module and optimizer state on the CPU after a stage, NaN with a checkpoint every step, each
strategy on one GPU, and the out-of-memory error. Every test skips without CUDA (conftest)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import trainer
from tests.models import (
    Regressor,
    assert_bitwise_equal,
    every_step_checkpoints,
    loader,
    make_net,
    params,
    regression_data,
)

pytestmark = pytest.mark.cuda
STEADY = (3, 9)  # steps [3, 9): past the first steps' allocations and lazy set-up, before any allowed point


def gpu(tmp_path: Path, **kwargs: Any) -> trainer.Trainer:
    defaults: dict[str, Any] = dict(
        accelerator="cuda",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    return trainer.Trainer(**{**defaults, **kwargs})


def cpu_batches(n: int = 12, batch: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = regression_data(n * batch)
    return [(data.tensors[0][i : i + batch], data.tensors[1][i : i + batch]) for i in range(0, n * batch, batch)]


class OnDevice(torch.utils.data.Dataset[Any]):
    """Batches already on the GPU (DataLoader(batch_size=None) hands them out as they are): the step alone."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = [tuple(t.cuda() for t in b) for b in batches]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Any:
        return self.batches[i]


# ---- AMP: bitwise equal to autocast + GradScaler written by hand ------------------------------------------
def raw_amp_loop(precision: str, clip: float | None, batches: list[Any]) -> list[torch.Tensor]:
    torch.manual_seed(0)
    net = make_net().cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if precision == "16-mixed" else None
    for x, y in batches:
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=dtype):
            loss = F.mse_loss(net(x), y)
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(list(net.parameters()), clip)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(list(net.parameters()), clip)
            opt.step()
    return [p.detach().cpu() for p in net.parameters()]


class Plain(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self.net(x), y)


@pytest.mark.parametrize(("precision", "clip"), [("16-mixed", 0.5), ("16-mixed", None), ("bf16-mixed", None)])
def test_amp_is_bitwise_equal_to_a_raw_loop(tmp_path: Path, precision: str, clip: float | None) -> None:
    batches = cpu_batches()
    expected = raw_amp_loop(precision, clip, batches)
    torch.manual_seed(0)
    module = Plain()
    gpu(tmp_path, precision=precision, gradient_clip_val=clip).fit(module, batches)
    assert_bitwise_equal([p.cpu() for p in params(module)], expected)


# ---- exact mid-epoch resume -------------------------------------------------------------------------
class Scheduled(Regressor):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def resume_run(root: Path, precision: str, ckpt: Path | None = None) -> tuple[list[torch.Tensor], int]:
    torch.manual_seed(0)
    module = Scheduled(dropout=0.2, lr=0.01)
    every_step = every_step_checkpoints(root / "ckpts")
    fit = gpu(root, max_epochs=2, precision=precision, callbacks=[every_step], enable_checkpointing=True)
    fit.fit(module, loader(regression_data(56), batch_size=8, shuffle=True), ckpt_path=ckpt)
    return [p.cpu() for p in params(module)], fit.global_step


@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
def test_mid_epoch_resume_is_bitwise_equal(tmp_path: Path, precision: str) -> None:
    final, steps = resume_run(tmp_path / "full", precision)
    for step in (3, 9):  # inside the first and the second epoch
        resumed, resumed_steps = resume_run(
            tmp_path / f"r{step}", precision, tmp_path / "full" / "ckpts" / f"step{step}.ckpt"
        )
        assert resumed_steps == steps
        assert_bitwise_equal(resumed, final)


# ---- no synchronization in a steady step -------------------------------------------------------------
class SyncWatch(trainer.Callback):
    """Sync debug mode over the steady steps, from one batch's start to a later one's: the step, the
    logging, every callback's batch hooks (the progress bar's too) lie inside. ``allow`` counts
    synchronizations (warn mode) instead of refusing them."""

    def __init__(self, allow: bool = False) -> None:
        self.allow = allow
        self.caught: list[warnings.WarningMessage] = []
        self._catch: Any = None

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == STEADY[0]:
            torch.cuda.synchronize()
            if self.allow:
                self._catch = warnings.catch_warnings(record=True)
                self.caught = self._catch.__enter__()
                warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn" if self.allow else "error")
        elif batch_idx == STEADY[1]:
            self.stop()

    def stop(self) -> None:
        torch.cuda.set_sync_debug_mode(0)
        if self._catch is not None:
            self._catch.__exit__(None, None, None)
            self._catch = None

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        self.stop()


class Logged(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss


class Manual(Logged):
    def __init__(self) -> None:
        super().__init__(adam=True)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        opt.step()


@pytest.fixture
def sync_mode_reset() -> Iterator[None]:
    yield
    torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("bar", [False, True], ids=["no-bar", "bar"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("kind", [Logged, Manual], ids=["automatic", "manual"])
def test_steady_steps_never_synchronize(
    tmp_path: Path, sync_mode_reset: None, kind: type, precision: str, bar: bool
) -> None:
    """Default flags (on_nonfinite_loss="raise"), the loss logged to the bar, a logger and checkpointing:
    a synchronization inside the steady steps raises."""
    watch = SyncWatch()
    fit = gpu(
        tmp_path,
        precision=precision,
        logger=True,
        enable_checkpointing=True,
        enable_progress_bar=bar,
        log_every_n_steps=50,
        callbacks=[watch],
    )
    fit.fit(kind(), torch.utils.data.DataLoader(OnDevice(cpu_batches(12)), batch_size=None))
    assert fit.global_step == 12


@pytest.mark.parametrize("kind", [Logged, Manual], ids=["automatic", "manual"])
def test_fp16_steps_synchronize_only_in_the_scalers_step(tmp_path: Path, sync_mode_reset: None, kind: type) -> None:
    """GradScaler.step reads its overflow flag (one synchronization per step, as in a raw loop): no other."""
    watch = SyncWatch(allow=True)
    fit = gpu(tmp_path, precision="16-mixed", logger=True, log_every_n_steps=50, callbacks=[watch])
    fit.fit(kind(), torch.utils.data.DataLoader(OnDevice(cpu_batches(12)), batch_size=None))
    sites = [f"{w.filename}:{w.lineno}" for w in watch.caught if "synchroniz" in str(w.message)]
    assert sites and all("grad_scaler" in site for site in sites), sites
    assert len(sites) <= STEADY[1] - STEADY[0], sites


# ---- Lightning's teardown: the module and the optimizer state on the CPU after each stage -------------------
def test_module_and_optimizer_state_are_on_the_cpu_after_fit_and_validate(tmp_path: Path) -> None:
    held_before = torch.cuda.memory_allocated()  # earlier tests' tensors may still be alive
    module = Regressor(adam=True)
    fit = gpu(tmp_path)
    data = loader(regression_data(32))
    fit.fit(module, data, data)
    devices = {p.device.type for p in module.parameters()}
    states = {t.device.type for s in fit.optimizers[0].state.values() for k, t in s.items() if k != "step"}
    assert devices == {"cpu"} and states == {"cpu"}
    fit.validate(module, data)  # moved back to the GPU for the stage, and off it again
    assert {p.device.type for p in module.parameters()} == {"cpu"}
    assert torch.cuda.memory_allocated() - held_before < 1024**2  # what the fit held is free for the next job


# ---- NaN at step k with a checkpoint every step ------------------------------------------------------
class NaNFrom(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * math.nan if self.trainer.global_step >= 5 else loss


@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
def test_nan_at_step_5_raises_naming_it_and_no_checkpoint_holds_nonfinite_weights(
    tmp_path: Path, precision: str
) -> None:
    every = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=1, save_top_k=-1)
    fit = gpu(tmp_path, precision=precision, enable_checkpointing=True, callbacks=[every], log_every_n_steps=50)
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(nan\) at epoch 0, global step 5;"):
        fit.fit(NaNFrom(), loader(regression_data(96)))
    saved = sorted((tmp_path / "ckpts").glob("*.ckpt"))
    assert saved
    for path in saved:
        state = torch.load(path, weights_only=True, map_location="cpu")
        assert all(torch.isfinite(t).all() for t in state["state_dict"].values()), path


# ---- each strategy on one GPU: fit, checkpoint, resume ----------------------------------------------------
@pytest.mark.parametrize("strategy", ["single", "ddp", "dp", "fsdp"])
def test_each_strategy_fits_checkpoints_and_resumes_on_one_gpu(tmp_path: Path, strategy: str) -> None:
    data = loader(regression_data(32))
    first = gpu(tmp_path, strategy=strategy, enable_checkpointing=True)
    first.fit(Regressor(), data, data)
    last = sorted((tmp_path).rglob("*.ckpt"))
    assert last, "no checkpoint written"
    again = gpu(tmp_path / "again", strategy=strategy, max_epochs=2)
    module = Regressor()
    again.fit(module, data, data, ckpt_path=last[-1])
    assert again.global_step == 8 and again.current_epoch == 2
    assert all(torch.isfinite(p).all() for p in module.parameters())


# ---- out of memory ---------------------------------------------------------------------------------
class Greedy(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 2:
            total = torch.cuda.get_device_properties(0).total_memory
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        return super().training_step(batch, batch_idx)


def test_out_of_memory_names_stage_step_batch_and_memory(tmp_path: Path) -> None:
    with pytest.raises(torch.OutOfMemoryError) as caught:
        gpu(tmp_path).fit(Greedy(), loader(regression_data(64)))
    message = str(caught.value)
    assert "out of memory in stage 'train' at epoch 0, global step 2" in message
    assert "batch: [(8, 8) float32, (8, 1) float32]" in message
    assert "this process holds" in message and "the card has" in message
