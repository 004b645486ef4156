"""Lightning semantics of the loop that scripts depend on: gradients seen at batch end, -1 from
on_train_batch_start, configure_callbacks, and hooks nothing would call refused at fit start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, params, quiet, regression_data


def test_gradients_are_still_there_in_on_train_batch_end(tmp_path: Path) -> None:
    """Lightning zeroes them at the start of the next step, so a histogram of gradients logged at batch
    end shows the step's gradients (a loop that zeroes after the step shows None)."""
    seen: list[float] = []

    class Histograms(Regressor):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            grads = [p.grad for p in self.parameters()]
            assert all(g is not None for g in grads)
            seen.append(float(sum(g.abs().sum() for g in grads if g is not None)))

    quiet(tmp_path, max_epochs=1).fit(Histograms(), loader(regression_data(32)))
    assert len(seen) == 4 and all(v > 0 for v in seen) and len(set(seen)) == 4


def test_accumulated_gradients_are_not_lost_to_the_later_zero_grad(tmp_path: Path) -> None:
    """zero_grad moved to the first micro-batch of each window: the math is a hand-written loop's."""
    torch.manual_seed(0)
    module = Regressor()
    reference = Regressor()
    reference.load_state_dict(module.state_dict())
    quiet(tmp_path, max_epochs=1, accumulate_grad_batches=2).fit(module, loader(regression_data(32)))
    opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for i, (x, y) in enumerate(loader(regression_data(32))):
        (torch.nn.functional.mse_loss(reference.net(x), y) / 2).backward()
        if i % 2 == 1:
            opt.step()
            opt.zero_grad()
    assert all(torch.equal(a, b) for a, b in zip(params(module), params(reference)))


def test_minus_one_from_on_train_batch_start_ends_the_epoch_there(tmp_path: Path) -> None:
    class Short(Regressor):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
            return -1 if batch_idx == 2 else None

    fit = quiet(tmp_path, max_epochs=2)
    fit.fit(Short(), loader(regression_data(48)))
    assert fit.global_step == 4 and fit.current_epoch == 2  # 2 batches in each of 2 epochs


def test_configure_callbacks_adds_and_replaces_the_trainer_s_of_the_same_type(tmp_path: Path) -> None:
    mine = trainer.EarlyStopping(monitor="val_loss", patience=7)

    class WithCallbacks(Regressor):
        def configure_callbacks(self) -> Any:
            return [mine]

    fit = quiet(tmp_path, max_epochs=1, callbacks=[trainer.EarlyStopping(monitor="val_loss", patience=1)])
    fit.fit(WithCallbacks(), loader(regression_data(16)), loader(regression_data(16)))
    early = [cb for cb in fit.callbacks if isinstance(cb, trainer.EarlyStopping)]
    assert early == [mine]


@pytest.mark.parametrize(
    ("hook", "advice"),
    [
        ("validation_epoch_end", r"on_validation_epoch_end"),
        ("training_epoch_end", r"on_train_epoch_end"),
        ("training_step_end", r"end of training_step"),
        ("on_epoch_end", r"on_train_epoch_end"),
    ],
)
def test_a_lightning_1_hook_on_the_module_is_refused_at_fit_start(tmp_path: Path, hook: str, advice: str) -> None:
    steps: list[int] = []

    class Old(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            steps.append(batch_idx)
            return super().training_step(batch, batch_idx)

    setattr(Old, hook, lambda self, *args: None)
    with pytest.raises(NotImplementedError, match=rf"Old\.{hook}\(\) is a hook Lightning 2 removed.*{advice}"):
        quiet(tmp_path, max_epochs=1).fit(Old(), loader(regression_data(16)))
    assert steps == []


def test_a_lightning_1_hook_on_a_callback_is_refused_too(tmp_path: Path) -> None:
    class OldCallback(trainer.Callback):
        def on_epoch_end(self, trainer: Any, pl_module: Any) -> None: ...

    with pytest.raises(NotImplementedError, match=r"OldCallback\.on_epoch_end\(\) .* callback's code"):
        quiet(tmp_path, max_epochs=1, callbacks=[OldCallback()]).fit(Regressor(), loader(regression_data(16)))


def test_validate_called_from_a_hook_during_fit_is_a_clear_error(tmp_path: Path) -> None:
    class Nested(Regressor):
        def on_train_epoch_end(self) -> None:
            self.trainer.validate(self, loader(regression_data(16)))  # type: ignore[attr-defined]

    with pytest.raises(RuntimeError, match=r"Trainer\.validate\(\) was called while Trainer\.fit\(\) runs.*val_check"):
        quiet(tmp_path, max_epochs=1).fit(Nested(), loader(regression_data(16)), loader(regression_data(16)))


def test_should_stop_from_the_step_validates_before_stopping_mid_epoch(tmp_path: Path) -> None:
    """Lightning runs the validation due at a requested stop, so a monitor sees the final state."""
    validated: list[int] = []

    class Stops(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                self.trainer.should_stop = True
            return super().training_step(batch, batch_idx)

        def on_validation_epoch_end(self) -> None:
            validated.append(self.trainer.global_step)

    fit = quiet(tmp_path, max_epochs=3)
    fit.fit(Stops(), loader(regression_data(48)), loader(regression_data(16)))
    assert fit.global_step == 2 and validated == [2]


def test_min_epochs_keeps_training_past_a_stop_request(tmp_path: Path) -> None:
    es = trainer.EarlyStopping(monitor="val_loss", patience=0, min_delta=1e9)  # stops at the first check
    fit = quiet(tmp_path, max_epochs=5, min_epochs=3, callbacks=[es])
    fit.fit(Regressor(), loader(regression_data(16)), loader(regression_data(16)))
    assert fit.current_epoch == 3


class _NoIndex(Regressor):
    """Steps written as Lightning's templates allow: no ``batch_idx``."""

    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any) -> None:  # type: ignore[override]
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return self.net(batch[0])


def test_steps_without_batch_idx_run_and_the_module_is_unchanged_after(tmp_path: Path) -> None:
    module = _NoIndex()
    fit = quiet(tmp_path, max_epochs=1)
    fit.fit(module, loader(regression_data()), loader(regression_data()))
    assert fit.global_step == 12 and "val_loss" in fit.callback_metrics
    assert len(fit.predict(module, loader(regression_data()))) == 12  # type: ignore[arg-type]
    assert "training_step" not in module.__dict__  # the shadow lives for the stage only


def test_evaluating_after_fit_without_a_model_uses_the_best_checkpoint_as_lightning(tmp_path: Path) -> None:
    module = Regressor()
    fit = quiet(
        tmp_path, max_epochs=3, enable_checkpointing=True, callbacks=[trainer.ModelCheckpoint(monitor="val_loss")]
    )
    fit.fit(module, loader(regression_data()), loader(regression_data()))
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    zeros = fit.validate(module, loader(regression_data()), verbose=False)[0]["val_loss"]  # a model: as it is
    with pytest.warns(
        UserWarning,
        match=r"validate\(ckpt_path=None\)` was called without a model. The best model of the previous `fit`",
    ):
        best = fit.validate(dataloaders=loader(regression_data()), verbose=False)[0]["val_loss"]
    assert best == pytest.approx(fit.checkpoint_callback.best_model_score.item()) and best < zeros


def test_a_checkpoint_set_on_the_trainer_is_loaded_by_the_stages_that_follow(tmp_path: Path) -> None:
    """Lightning's ``trainer.ckpt_path = path``: each later stage given no ckpt_path loads it; one given
    another loads that one, with Lightning's warning, and the choice is dropped."""
    module = Regressor()
    fit = quiet(tmp_path, max_epochs=1)
    fit.fit(module, loader(regression_data()))
    trained = tmp_path / "trained.ckpt"
    fit.save_checkpoint(trained)
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    zeros = tmp_path / "zeros.ckpt"
    fit.save_checkpoint(zeros)

    fit.ckpt_path = trained
    assert fit.ckpt_path == str(trained)
    first = fit.validate(module, loader(regression_data()), verbose=False)[0]["val_loss"]
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    again = fit.validate(module, loader(regression_data()), verbose=False)[0]["val_loss"]
    assert fit.ckpt_path == str(trained) and first == again
    with pytest.warns(UserWarning, match=r"trainer.ckpt_path = .*trained.ckpt.* The latter will be loaded"):
        from_zeros = fit.validate(module, loader(regression_data()), ckpt_path=zeros, verbose=False)[0]["val_loss"]
    assert fit.ckpt_path == str(zeros) and from_zeros != first
    assert fit.validate(module, loader(regression_data()), verbose=False)[0]["val_loss"] == from_zeros  # dropped


def test_without_a_best_checkpoint_the_weights_as_they_are_are_evaluated(tmp_path: Path) -> None:
    module = Regressor()
    fit = quiet(tmp_path, max_epochs=1)  # no ModelCheckpoint: Lightning raises, we evaluate what fit left
    fit.fit(module, loader(regression_data()))
    assert fit.validate(dataloaders=loader(regression_data()), verbose=False)[0]["val_loss"] >= 0


@pytest.mark.parametrize(("per_node", "calls_on_second_node"), [(True, 1), (False, 0)])
def test_prepare_data_per_node_false_runs_on_global_rank_zero_only(per_node: bool, calls_on_second_node: int) -> None:
    """The second machine's local rank zero (global rank 2 of 4): it prepares its own copy unless
    ``prepare_data_per_node = False`` says the file system is shared."""
    from types import SimpleNamespace

    from trainer.loops.lifecycle import _prepare_data

    calls: list[str] = []

    class Data(trainer.DataModule):
        prepare_data_per_node = per_node

        def prepare_data(self) -> None:
            calls.append("datamodule")

    class Model(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.prepare_data_per_node = per_node

        def prepare_data(self) -> None:
            calls.append("module")

    second_node = SimpleNamespace(local_rank=0, is_global_zero=False, barrier=lambda: calls.append("barrier"))
    _prepare_data(SimpleNamespace(strategy=second_node, profiler=None), Model(), Data())  # type: ignore[arg-type]
    assert calls == ["datamodule", "module"] * calls_on_second_node + ["barrier"]
