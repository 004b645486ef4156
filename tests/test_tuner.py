"""``trainer.tuner.Tuner``: lr_find and scale_batch_size leave the run as it was, but for the value they tune."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import assert_bitwise_equal, params, quiet, regression_data
from trainer.tuner import LRFinder, Tuner
from trainer.utilities import is_oom_error


class Tunable(trainer.Module):
    """Regression whose loaders read ``self.batch_size`` and whose step fails as out of memory above ``oom_above``."""

    def __init__(self, lr: float = 0.05, batch_size: int = 8, oom_above: int = 10**9, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
        )
        self.lr = lr
        self.batch_size = batch_size
        self.oom_above = oom_above

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if x.shape[0] > self.oom_above:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (a test's stand-in)")
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        if batch[0].shape[0] > self.oom_above:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1000000 bytes.")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(256), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(64, seed=1), batch_size=self.batch_size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def fit(tmp_path: Path, model: Tunable, tune: str = "", **tune_args: object) -> tuple[list[torch.Tensor], object]:
    torch.manual_seed(0)
    tuned: object = None
    model_trainer = quiet(tmp_path, max_epochs=1)
    if tune:
        tuned = getattr(Tuner(model_trainer), tune)(model, **tune_args)
    model_trainer.fit(model)
    return params(model), tuned


def test_fit_after_lr_find_equals_fit_without_it(tmp_path: Path) -> None:
    torch.manual_seed(1)
    plain, _ = fit(tmp_path, Tunable())
    torch.manual_seed(1)
    model = Tunable()
    after, finder = fit(tmp_path, model, "lr_find", num_training=20, update_attr=False, early_stop_threshold=None)
    assert isinstance(finder, LRFinder) and len(finder.results["lr"]) == 20
    assert model.lr == 0.05
    assert_bitwise_equal(plain, after)


def test_lr_find_update_attr_is_the_only_change(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Tunable()
    after, finder = fit(tmp_path, model, "lr_find", num_training=30)
    assert isinstance(finder, LRFinder)
    suggestion = finder.suggestion()
    assert suggestion is not None and model.lr == suggestion and model.hparams["lr"] == suggestion
    torch.manual_seed(1)
    direct, _ = fit(tmp_path, Tunable(lr=suggestion))
    assert_bitwise_equal(direct, after)


def test_lr_find_schedule_and_suggestion_on_a_toy_problem(tmp_path: Path) -> None:
    """Full-batch regression with SGD: the suggestion lies where the loss falls, below where it diverges."""
    torch.manual_seed(0)
    model = Tunable(dropout=0.0, batch_size=256)
    finder = Tuner(quiet(tmp_path, max_epochs=100)).lr_find(model, min_lr=1e-5, max_lr=10.0, num_training=80)
    assert finder is not None
    lrs, losses = finder.results["lr"], finder.results["loss"]
    assert lrs[0] == pytest.approx(1e-5) and lrs[1] == pytest.approx(1e-5 * 1e6 ** (2 / 80))
    assert len(lrs) == len(losses) < 80  # the loss diverged at a large rate and stopped the search
    suggestion = finder.suggestion()
    kept = losses[10:]  # the suggestion's skip_begin: the first points carry the average's start-up bias
    best = lrs[10 + kept.index(min(kept))]
    assert suggestion is not None and 1e-3 < suggestion < best < 2.0, (suggestion, best)
    i = lrs.index(suggestion)
    assert losses[i + 3] < losses[i] < losses[i - 3]  # falling there
    assert model.lr == suggestion


def test_lr_find_linear_mode(tmp_path: Path) -> None:
    finder = Tuner(quiet(tmp_path, max_epochs=1)).lr_find(
        Tunable(), min_lr=0.01, max_lr=0.1, num_training=10, mode="linear", update_attr=False
    )
    assert finder is not None
    assert finder.results["lr"] == pytest.approx([0.01] + [0.01 + (k + 1) / 10 * 0.09 for k in range(1, 10)])


def test_lr_find_plot_without_matplotlib_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    finder = LRFinder("exponential", 1e-3, 1.0, 5)
    finder.results = {"lr": [1e-3, 1e-2, 1e-1], "loss": [1.0, 0.5, 2.0]}
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ModuleNotFoundError, match="pip install matplotlib"):
        finder.plot(suggest=True)


def test_lr_find_plot_returns_a_figure() -> None:
    pytest.importorskip("matplotlib")
    finder = LRFinder("exponential", 1e-3, 1.0, 5)
    finder.results = {"lr": [10.0**-k for k in range(14, 0, -1)], "loss": [1.0 - k / 20 for k in range(14)]}
    figure = finder.plot(suggest=True)
    assert figure.axes[0].get_xscale() == "log" and len(figure.axes[0].lines) == 2


@pytest.mark.parametrize(("mode", "expected"), [("power", 16), ("binsearch", 20)])
def test_scale_batch_size_finds_the_threshold(tmp_path: Path, mode: str, expected: int) -> None:
    model = Tunable(oom_above=20)
    found = Tuner(quiet(tmp_path, max_epochs=1)).scale_batch_size(model, mode=mode, margin=0.0)
    assert found == expected and model.batch_size == expected and model.hparams["batch_size"] == expected


def test_scale_batch_size_binsearch_margin_and_eval_method(tmp_path: Path) -> None:
    model = Tunable(oom_above=20)
    assert Tuner(quiet(tmp_path)).scale_batch_size(model, mode="binsearch", method="validate") == 19  # 20 - 5%


def test_fit_after_scale_batch_size_equals_fit_without_it(tmp_path: Path) -> None:
    torch.manual_seed(1)
    plain, _ = fit(tmp_path, Tunable(batch_size=16))
    torch.manual_seed(1)
    model = Tunable(oom_above=20)
    after, found = fit(tmp_path, model, "scale_batch_size", mode="power")
    assert found == 16
    assert_bitwise_equal(plain, after)


def test_scale_batch_size_stops_at_the_dataset_length_and_max_val(tmp_path: Path) -> None:
    assert Tuner(quiet(tmp_path)).scale_batch_size(Tunable(), steps_per_trial=1, init_val=64) == 256
    assert Tuner(quiet(tmp_path)).scale_batch_size(Tunable(), steps_per_trial=1, init_val=16, max_val=64) == 64


def test_other_errors_are_not_taken_for_out_of_memory(tmp_path: Path) -> None:
    class Broken(Tunable):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        Tuner(quiet(tmp_path)).scale_batch_size(Broken())
    assert is_oom_error(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    assert not is_oom_error(ValueError("out of memory"))


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    tuner = Tuner(quiet(tmp_path))
    with pytest.raises(ValueError, match="mode='binary'"):
        tuner.scale_batch_size(Tunable(), mode="binary")
    with pytest.raises(ValueError, match="Field bs not found"):
        tuner.scale_batch_size(Tunable(), batch_arg_name="bs")
    with pytest.raises(ValueError, match="dataloaders passed directly"):
        tuner.scale_batch_size(Tunable(), train_dataloaders=Tunable().train_dataloader())
    with pytest.raises(ValueError, match="method='fit' is the only"):
        tuner.lr_find(Tunable(), method="test")
    with pytest.raises(ValueError, match="mode='log'"):
        tuner.lr_find(Tunable(), mode="log")
    with pytest.raises(AttributeError, match="set to step_size"):
        tuner.lr_find(Tunable(), attr_name="step_size")
