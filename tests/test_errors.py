"""Every bad input fails with a message that names the bad value and the valid choices, before any work."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import trainer
from tests import models
from tests.models import Regressor, loader, params, regression_data
from trainer.checkpoint import CheckpointError


def quiet(tmp_path: Path, **kwargs: Any) -> trainer.Trainer:
    return models.quiet(tmp_path, **{"max_epochs": 1, **kwargs})


class CountingDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Records every fetch, so a test can tell that no work was done."""

    def __init__(self, n: int = 16) -> None:
        self.base = regression_data(n)
        self.fetched = 0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.fetched += 1
        return self.base[i]


# ---- Trainer flags -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "mentions"),
    [
        (dict(accelerator="tpu"), ["'tpu'", "cpu", "cuda"]),
        (dict(strategy="fsdp9"), ["'fsdp9'", "single", "ddp"]),
        (dict(precision="8-bit"), ["'8-bit'", "32-true", "16-mixed", "bf16-mixed"]),
        (dict(precision=8), ["8", "32-true", "64-true"]),
        (dict(max_epochs=-2), ["max_epochs=-2", ">= 0, -1 (no limit)"]),
        (dict(max_steps=-2), ["max_steps=-2", "-1"]),
        (dict(accumulate_grad_batches=0), ["accumulate_grad_batches=0", ">= 1"]),
        (dict(gradient_clip_algorithm="foo"), ["'foo'", "norm", "value"]),
        (dict(gradient_clip_val=-1.0), ["gradient_clip_val=-1.0", "> 0"]),
        (dict(limit_train_batches=-1), ["limit_train_batches=-1", "fraction"]),
        (dict(limit_train_batches=1.5), ["limit_train_batches=1.5", "[0.0, 1.0]"]),
        (dict(limit_val_batches=True), ["limit_val_batches=True"]),
        (dict(log_every_n_steps=-1), ["log_every_n_steps=-1", ">= 0"]),
        (dict(on_nonfinite_loss="bar"), ["'bar'", "raise", "skip", "off"]),
        (dict(check_val_every_n_epoch=0), ["check_val_every_n_epoch=0"]),
    ],
)
def test_bad_trainer_flag_names_value_and_choices(tmp_path: Path, flags: dict[str, Any], mentions: list[str]) -> None:
    with pytest.raises(ValueError) as exc:
        quiet(tmp_path, **flags)
    for text in mentions:
        assert text in str(exc.value), f"{text!r} missing from: {exc.value}"
    assert not any(tmp_path.iterdir()), "a rejected Trainer must not touch the disk"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("name", ["cuda", "gpu"], ids=["named-cuda", "named-gpu"])  # id "cuda" = cuda marker
def test_cuda_without_cuda_says_so_and_suggests_cpu(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"no CUDA device.*accelerator='cpu'"):
        quiet(tmp_path, accelerator=name)


_BEYOND_CORES = (os.cpu_count() or 1) + 4  # an index out of range whatever the machine's core count


@pytest.mark.parametrize(
    ("devices", "pattern"),
    [
        (0, r"devices=0\)` value is not a valid input"),
        (-2, r"devices=-2 must be a positive count"),
        (
            [_BEYOND_CORES],
            rf"devices=\[{_BEYOND_CORES}\] is out of range: cpu has \d+ device\(s\) \(indices 0\.\.\d+\)",
        ),
        ([-1], r"devices=\[-1\] is out of range"),
        ([0, 0], r"devices=\[0, 0\] lists an index more than once"),
        ("abc", r"devices='abc' is not a count, a comma-separated list of indices, -1 or 'auto'"),
        ((os.cpu_count() or 1) + 1, r"CPU processes but this machine has \d+ cores"),
    ],
)
def test_devices_out_of_range_for_cpu(tmp_path: Path, devices: Any, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        quiet(tmp_path, devices=devices)


def test_single_strategy_refuses_several_devices(tmp_path: Path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 cores")
    with pytest.raises(ValueError, match=r"strategy='single' runs on one device.*strategy='ddp'"):
        quiet(tmp_path, strategy="single", devices=2)


@pytest.mark.parametrize(
    ("logger", "callbacks", "pattern"),
    [
        ("csv", None, r"logger= takes True/False, a Logger or a list of them; got str"),
        (False, [object()], r"callbacks= takes Callback instances; got object"),
    ],
)
def test_bad_logger_or_callback_objects(tmp_path: Path, logger: Any, callbacks: Any, pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern):
        quiet(tmp_path, logger=logger, callbacks=callbacks)


# ---- the Module ----------------------------------------------------------------------------------
class NoTrainingStep(trainer.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NoOptimizers(trainer.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).mean()


@pytest.mark.parametrize(
    ("module", "pattern"),
    [
        (NoTrainingStep(), r"NoTrainingStep must define training_step\(batch, batch_idx\)"),
        (NoOptimizers(), r"NoOptimizers must define configure_optimizers\(\)"),
    ],
)
def test_incomplete_module_fails_before_any_batch(tmp_path: Path, module: trainer.Module, pattern: str) -> None:
    ds = CountingDataset()
    with pytest.raises(AttributeError, match=pattern):
        quiet(tmp_path).fit(module, DataLoader(ds, batch_size=4))
    assert ds.fetched == 0


def test_fit_with_a_plain_nn_module_names_the_type(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"must be a `LightningModule`.*got `Linear`.*takes a trainer\.Module"):
        quiet(tmp_path).fit(torch.nn.Linear(8, 1), loader(regression_data(16)))  # type: ignore[arg-type]


class ReturnsFromConfigure(Regressor):
    def __init__(self, returned: Any = None) -> None:
        super().__init__()
        self.returned = returned

    def configure_optimizers(self) -> Any:
        made = self.returned(self) if callable(self.returned) else self.returned
        return made


def _sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(m.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("returned", "error", "pattern"),
    [
        ("adam", TypeError, r"Unknown configuration for model optimizers: configure_optimizers\(\) returned str"),
        ([], TypeError, r"gave no optimizer where optimizers belong"),
        (lambda m: [_sgd(m), "sgd"], TypeError, r"gave \['str'\] where optimizers belong"),
        (
            lambda m: {"lr_scheduler": torch.optim.lr_scheduler.StepLR(_sgd(m), 1)},
            ValueError,
            r"dict needs an 'optimizer' key; got keys \['lr_scheduler'\]",
        ),
        (
            lambda m: {
                "optimizer": (o := _sgd(m)),
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "interval": "batch"},
            },
            ValueError,
            r'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "batch"',
        ),
        (
            lambda m: {
                "optimizer": (o := _sgd(m)),
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "frequency": 0},
            },
            ValueError,
            r"frequency=0 must be an int >= 1",
        ),
        (
            lambda m: {"optimizer": _sgd(m), "lr_scheduler": {"interval": "step"}},
            ValueError,
            r"must have the key \"scheduler\".*; got keys \['interval'\]",
        ),
        (lambda m: ([_sgd(m)], ["not a scheduler"]), TypeError, r"lr scheduler `str` is invalid. It should have"),
        (lambda m: ([_sgd(m)], [_sgd(m)]), TypeError, r"lr scheduler `SGD` is invalid: it is an optimizer"),
    ],
)
def test_bad_configure_optimizers_is_explained(
    tmp_path: Path, returned: Any, error: type[Exception], pattern: str
) -> None:
    ds = CountingDataset()
    with pytest.raises(error, match=pattern):
        quiet(tmp_path).fit(ReturnsFromConfigure(returned), DataLoader(ds, batch_size=4))
    assert ds.fetched == 0


def test_a_tuple_of_two_optimizers_is_two_optimizers_and_automatic_optimization_refuses_them(
    tmp_path: Path,
) -> None:
    """``(opt1, opt2)`` is two optimizers, not (optimizer, scheduler); automatic optimization steps one
    optimizer on one loss, so two are refused before any step (before, both stepped on the same loss)."""
    from trainer.optim import parse_optimizers

    module = Regressor()
    first = torch.optim.SGD(module.net[0].parameters(), lr=0.1)  # type: ignore[index]
    second = torch.optim.SGD(module.net[3].parameters(), lr=0.1)  # type: ignore[index]
    assert parse_optimizers((first, second)) == ([first, second], [])

    module = ReturnsFromConfigure(lambda m: (torch.optim.SGD(m.parameters(), lr=0.1),) * 2)
    before = params(module)
    with pytest.raises(ValueError, match=r"returned 2 optimizers, but automatic optimization steps one"):
        quiet(tmp_path).fit(module, loader(regression_data(16), batch_size=4))
    assert all(torch.equal(a, b) for a, b in zip(before, params(module)))


# ---- what training_step returns ----------------------------------------------------------------
class BadStep(Regressor):
    def __init__(self, kind: str = "vector", bad_at: int = 0) -> None:
        super().__init__()
        self.kind = kind
        self.bad_at = bad_at
        self.seen: list[int] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> Any:
        self.seen.append(batch_idx)
        x, y = batch
        out = self.net(x)
        if batch_idx != self.bad_at:
            return torch.nn.functional.mse_loss(out, y)
        if self.kind == "vector":
            return (out - y) ** 2
        if self.kind == "no_grad":
            return torch.nn.functional.mse_loss(out, y).detach()
        if self.kind == "string":
            return "loss"
        if self.kind == "dict_without_loss":
            return {"value": out.mean()}
        return torch.nn.functional.mse_loss(out, y) * math.nan


@pytest.mark.parametrize(
    ("kind", "error", "pattern"),
    [
        ("vector", ValueError, r"loss of shape \(4, 1\); it must be a scalar"),
        ("no_grad", ValueError, r"does not require grad"),
        (
            "string",
            TypeError,
            r"must return a Tensor, a dict, or None \(where the step will be skipped\); got str at global step 0",
        ),
        ("dict_without_loss", TypeError, r"the 'loss' key needs to be present"),
    ],
)
@pytest.mark.parametrize(("on_nonfinite_loss", "accumulate"), [("raise", 1), ("skip", 1), ("off", 1), ("raise", 2)])
def test_bad_training_step_output(
    tmp_path: Path, kind: str, error: type[Exception], pattern: str, on_nonfinite_loss: str, accumulate: int
) -> None:
    """Whichever path the loss takes (finite check, scaling for accumulation, backward), the error names it."""
    module = BadStep(kind)
    fit = quiet(tmp_path, on_nonfinite_loss=on_nonfinite_loss, accumulate_grad_batches=accumulate)
    with pytest.raises(error, match=pattern):
        fit.fit(module, loader(regression_data(16), batch_size=4))
    assert module.seen == [0]


def test_nan_loss_raise_names_the_step(tmp_path: Path) -> None:
    module = BadStep("nan", bad_at=2)
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(nan\) at epoch 0, global step 2;.*'skip'"):
        quiet(tmp_path, on_nonfinite_loss="raise").fit(module, loader(regression_data(16), batch_size=4))
    assert module.seen == [0, 1, 2]


class Snapshots(trainer.Callback):
    """Parameters before and after each training batch."""

    def __init__(self) -> None:
        self.before: dict[int, list[torch.Tensor]] = {}
        self.after: dict[int, list[torch.Tensor]] = {}

    def on_train_batch_start(
        self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, batch_idx: int
    ) -> None:
        self.before[batch_idx] = params(module)

    def on_train_batch_end(
        self, trainer: trainer.Trainer, module: trainer.Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.after[batch_idx] = params(module)


@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
def test_nan_loss_skip_leaves_parameters_untouched_and_finishes(tmp_path: Path, precision: str) -> None:
    torch.manual_seed(0)
    module = BadStep("nan", bad_at=2)
    snaps = Snapshots()
    fit = quiet(tmp_path, on_nonfinite_loss="skip", callbacks=[snaps], precision=precision)
    g = torch.Generator().manual_seed(0)
    small = TensorDataset(0.1 * torch.randn(16, 8, generator=g), 0.1 * torch.randn(16, 1, generator=g))
    fit.fit(module, loader(small, batch_size=4))  # small values: no fp16 overflow
    assert module.seen == [0, 1, 2, 3]
    for a, b in zip(snaps.before[2], snaps.after[2]):
        assert torch.equal(a, b)
    for idx in (0, 1, 3):  # the other batches did train
        assert not all(torch.equal(a, b) for a, b in zip(snaps.before[idx], snaps.after[idx]))
    assert all(torch.isfinite(p).all() for p in module.parameters())


# ---- checkpoints -----------------------------------------------------------------------------------
def test_ckpt_path_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ckpt"
    ds = CountingDataset()
    with pytest.raises(FileNotFoundError, match=re.escape(f"ckpt_path={str(missing)!r} does not exist")):
        quiet(tmp_path).fit(Regressor(), DataLoader(ds, batch_size=4), ckpt_path=missing)
    assert ds.fetched == 0


def test_ckpt_path_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.ckpt"
    bogus.write_text("these are my notes, not a checkpoint\n")
    ds = CountingDataset()
    with pytest.raises(CheckpointError, match=r"notes\.ckpt \(\d+ bytes\) is not a readable torch checkpoint"):
        quiet(tmp_path).fit(Regressor(), DataLoader(ds, batch_size=4), ckpt_path=bogus)
    assert ds.fetched == 0


def _saved(tmp_path: Path, module: trainer.Module) -> Path:
    fit = quiet(tmp_path, max_steps=1)
    fit.fit(module, loader(regression_data(16, features=module.hparams.get("features", 8)), batch_size=4))
    path = tmp_path / "saved.ckpt"
    fit.save_checkpoint(path)
    return path


class Wider(Regressor):
    """Same layer names, hidden layer of another width."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Dropout(0.0), torch.nn.Linear(32, 1)
        )


class Renamed(Regressor):
    """Different layer names, same shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.body = self.net
        del self.net

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x), y)


def test_checkpoint_of_a_model_with_other_shapes(tmp_path: Path) -> None:
    path = _saved(tmp_path, Regressor())
    with pytest.raises(CheckpointError, match=r"net\.0\.weight: checkpoint \(16, 8\) vs model \(32, 8\)"):
        quiet(tmp_path).fit(Wider(), loader(regression_data(16), batch_size=4), ckpt_path=path)


def test_checkpoint_of_a_model_with_other_keys(tmp_path: Path) -> None:
    path = _saved(tmp_path, Regressor())
    with pytest.raises(CheckpointError) as exc:
        quiet(tmp_path).fit(Renamed(), loader(regression_data(16), batch_size=4), ckpt_path=path)
    message = str(exc.value)
    assert 'Missing key(s) in state_dict: "body.0.weight", "body.0.bias", "body.3.weight", "body.3.bias"' in message
    assert 'Unexpected key(s) in state_dict: "net.0.weight", "net.0.bias", "net.3.weight", "net.3.bias"' in message


def test_validate_with_checkpoint_of_other_model(tmp_path: Path) -> None:
    path = _saved(tmp_path, Regressor())
    with pytest.raises(CheckpointError, match=r"Missing key\(s\) in state_dict"):
        quiet(tmp_path).validate(Renamed(), loader(regression_data(16)), ckpt_path=path)


# ---- data ---------------------------------------------------------------------------------------------
def _empty() -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.zeros(0, 8), torch.zeros(0, 1)), batch_size=4)


def test_empty_train_loader(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"the training DataLoader is empty \(0 batches\)"):
        quiet(tmp_path).fit(Regressor(), _empty())


def test_empty_val_loader(tmp_path: Path) -> None:
    ds = CountingDataset()
    with pytest.raises(ValueError, match=r"the validation DataLoader is empty"):
        quiet(tmp_path).fit(Regressor(), DataLoader(ds, batch_size=4), _empty())
    assert ds.fetched == 0


def test_limit_zero_train_batches_trains_nothing_and_an_empty_dataset_is_refused(tmp_path: Path) -> None:
    """Lightning's ``limit_train_batches=0`` turns training off (trainer/test_trainer.py::test_disabled_training);
    an empty dataset is a mistake, refused by name (Lightning only warns)."""
    model = Regressor()
    before = [p.clone() for p in model.parameters()]
    fit = quiet(tmp_path, limit_train_batches=0, max_epochs=2)
    fit.fit(model, loader(regression_data(16)))
    assert fit.global_step == 0 and fit.current_epoch == 0 and fit.state.finished
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match=r"the training DataLoader is empty \(0 batches\)"):
        quiet(tmp_path).fit(Regressor(), loader(regression_data(0)))


class WithTestStep(Regressor):
    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)


@pytest.mark.parametrize(("method", "stage"), [("validate", "validation"), ("test", "test")])
def test_evaluation_without_loader(tmp_path: Path, method: str, stage: str) -> None:
    with pytest.raises(ValueError, match=rf"{stage} needs dataloaders= or a DataModule"):
        getattr(quiet(tmp_path), method)(WithTestStep())


def test_evaluation_without_step(tmp_path: Path) -> None:
    with pytest.raises(AttributeError, match=r"Regressor has no test_step\(\); define it to run test"):
        quiet(tmp_path).test(Regressor(), loader(regression_data(16)))


def test_fit_without_train_loader(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"fit\(\) needs a training DataLoader"):
        quiet(tmp_path).fit(Regressor())


def test_log_with_bad_reduce_fx(tmp_path: Path) -> None:
    class BadLog(Regressor):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            self.log("x", 1.0, reduce_fx="median")
            return super().training_step(batch, batch_idx)

    with pytest.raises(
        ValueError,
        match=r"self\.log\('x', reduce_fx='median'\): only `self\.log\(\.\.\., reduce_fx=\{min,max,mean,sum\}\)`",
    ):
        quiet(tmp_path).fit(BadLog(), loader(regression_data(16)))


class OffCpu(torch.Tensor):
    """A CPU tensor that reports it is not on the CPU: the stand-in for an accelerator's loss where torch has none."""

    @property
    def is_cpu(self) -> bool:
        return False


class NanAtSevenAndNine(Regressor):
    """Its loss is nan at global steps 7 and 9 only; ``off_cpu`` hands every loss back as an ``OffCpu`` tensor."""

    def __init__(self, off_cpu: bool = False, bad_steps: tuple[int, ...] = (7, 9)) -> None:
        super().__init__()
        self.off_cpu = off_cpu
        self.bad_steps = bad_steps

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if self.trainer.global_step in self.bad_steps:
            loss = loss * math.nan
        return loss.as_subclass(OffCpu) if self.off_cpu else loss


OFF_THE_CPU = [pytest.param("cuda", marks=pytest.mark.cuda), pytest.param("cpu", id="cpu-with-off-cpu-loss")]


@pytest.mark.parametrize("accelerator", OFF_THE_CPU)
@pytest.mark.parametrize("log_every_n_steps", [4, 50])  # read at steps 4 and 8, or only at the epoch end
def test_nonfinite_loss_off_the_cpu_raises_with_the_first_bad_step(
    tmp_path: Path, accelerator: str, log_every_n_steps: int
) -> None:
    """Off the CPU the finite check does not sync every step; its error must still name the first bad step."""
    fit = quiet(tmp_path, accelerator=accelerator, devices=1, log_every_n_steps=log_every_n_steps)
    module = NanAtSevenAndNine(off_cpu=accelerator == "cpu")
    with pytest.raises(FloatingPointError, match=r"non-finite loss.* at epoch 0, global step 7;.*'skip'"):
        fit.fit(module, loader(regression_data(64), batch_size=4))  # 16 steps: step 9 is bad too


@pytest.mark.parametrize("accelerator", OFF_THE_CPU)
def test_finite_losses_off_the_cpu_train_to_the_end(tmp_path: Path, accelerator: str) -> None:
    """The held-back check must not raise when no loss went bad."""
    fit = quiet(tmp_path, accelerator=accelerator, devices=1, log_every_n_steps=4)
    fit.fit(NanAtSevenAndNine(off_cpu=accelerator == "cpu", bad_steps=()), loader(regression_data(64), batch_size=4))
    assert fit.global_step == 16 and fit.current_epoch == 1
    assert fit.last_loss is not None and math.isfinite(float(fit.last_loss))


@pytest.mark.parametrize("accelerator", OFF_THE_CPU)
def test_a_checkpoint_is_never_written_from_weights_a_held_back_nonfinite_loss_made(
    tmp_path: Path, accelerator: str
) -> None:
    """Off the CPU the finite check waits for a logging interval; a checkpoint must not overwrite a good
    one with the NaN weights of the steps in between (found by a step checkpoint at every step)."""
    every = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=1, save_top_k=0, save_last=True)
    fit = quiet(
        tmp_path, accelerator=accelerator, devices=1, log_every_n_steps=50, enable_checkpointing=True, callbacks=[every]
    )
    with pytest.raises(FloatingPointError, match=r"global step 7"):
        fit.fit(NanAtSevenAndNine(off_cpu=accelerator == "cpu"), loader(regression_data(64), batch_size=4))
    last = torch.load(tmp_path / "ckpts" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 7  # saved after step 7's step (whose loss was still finite): before the NaN one
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values())


def test_gpu_without_a_gpu_says_so_in_lightnings_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """accelerator='gpu' on a machine with neither CUDA nor MPS: Lightning's error and type, and the flag to use."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(trainer.exceptions.MisconfigurationException, match=r"No supported gpu backend found!.*'cpu'"):
        trainer.Trainer(accelerator="gpu", devices=1, logger=False)
