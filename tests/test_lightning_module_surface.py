"""What a Lightning project reads and calls on its module: the trainer reference, export, dtype, loading with
``strict_loading``, the steps it leaves out, and the hooks' arguments and order at a stage's start and end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.utilities.rank_zero import LightningDeprecationWarning


class Forward(Regressor):
    """Regressor with the ``forward`` export and predict need."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_the_trainer_reference_reaches_inner_modules_and_an_unattached_one_says_so() -> None:
    outer, inner = Regressor(), Regressor()
    outer.inner = inner
    with pytest.raises(RuntimeError, match="Regressor is not attached to a `Trainer`"):
        _ = outer.trainer
    fit = quiet("unused")
    outer.trainer = fit  # type: ignore[assignment]
    assert inner.trainer is fit
    assert outer.dtype == torch.float32 and not outer.on_gpu
    assert outer.double().dtype == torch.float64


def test_to_torchscript_scripts_or_traces_in_eval_mode_and_keeps_the_modules_own_mode(tmp_path: Path) -> None:
    module = Forward()
    module.example_input_array = torch.randn(3, 8)
    expected = module.eval()(module.example_input_array)
    module.train()
    with pytest.warns(LightningDeprecationWarning, match="deprecated in v2.7"):  # the category Lightning names
        scripted = module.to_torchscript(file_path=tmp_path / "model.pt")
    assert module.training and not scripted.training
    assert torch.allclose(torch.jit.load(tmp_path / "model.pt")(module.example_input_array), expected)
    with pytest.deprecated_call():
        traced = module.to_torchscript(method="trace")
    assert torch.allclose(traced(module.example_input_array), expected)
    with pytest.deprecated_call(), pytest.raises(ValueError, match="only supports 'script' or 'trace'"):
        module.to_torchscript(method="compile")
    module.example_input_array = None
    with pytest.deprecated_call(), pytest.raises(ValueError, match="requires either `example_inputs`"):
        module.to_torchscript(method="trace")


def _checkpoint(tmp_path: Path, module: trainer.Module) -> Path:
    run = quiet(tmp_path, max_steps=1, enable_checkpointing=True)
    run.fit(module, loader(regression_data(16)))
    return Path(run.checkpoint_callback.best_model_path or run.checkpoint_callback.last_model_path)  # type: ignore[union-attr]


class WithHead(Regressor):
    """A head the checkpoint does not hold; ``strict_loading = False`` says it is fine."""

    def __init__(self, lenient: bool = True) -> None:
        super().__init__()
        self.head = torch.nn.Linear(1, 1)
        self.calls: list[str] = []
        if lenient:
            self.strict_loading = False

    def configure_model(self) -> None:
        self.calls.append("configure_model")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls.append("on_load_checkpoint")


def test_load_from_checkpoint_follows_strict_loading_and_runs_the_loading_hooks_first(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, Regressor())
    loaded = WithHead.load_from_checkpoint(path)
    assert loaded.calls == ["configure_model", "on_load_checkpoint"]
    assert torch.equal(loaded.net[0].weight, torch.load(path, weights_only=True)["state_dict"]["net.0.weight"])  # type: ignore[index]
    with pytest.raises(ValueError, match=r"strict=True\)` which is in conflict with `WithHead.strict_loading=False"):
        WithHead.load_from_checkpoint(path, strict=True)
    with pytest.raises(trainer.checkpoint.CheckpointError, match=r"Missing key\(s\) in state_dict"):
        WithHead.load_from_checkpoint(path, lenient=False)  # strict_loading unset: strict, as in Lightning


def test_a_module_without_a_validation_step_does_not_validate_and_a_zero_limit_runs_nothing(tmp_path: Path) -> None:
    class NoValidation(Regressor):
        validation_step = trainer.Module.validation_step  # Lightning's default: not written by the user

    calls: list[str] = []

    class Watch(trainer.Callback):
        def on_validation_start(self, trainer: Any, module: Any) -> None:
            calls.append("validation")

    run = quiet(tmp_path, max_epochs=1, callbacks=[Watch()])
    with pytest.warns(UserWarning, match="You passed in a `val_dataloader` but have no `validation_step`"):
        run.fit(NoValidation(), loader(regression_data(16)), loader(regression_data(16)))
    assert calls == [] and not run.enable_validation
    assert (
        quiet(tmp_path, limit_val_batches=0, callbacks=[Watch()]).validate(Regressor(), loader(regression_data())) == []
    )
    assert calls == []


def test_setup_and_teardown_get_stage_by_keyword_and_grads_are_cleared_as_a_stage_starts(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Keywords(Regressor):
        def setup(self, **kwargs: Any) -> None:
            seen.append(("setup", kwargs))
            self.net[0].weight.grad = torch.ones_like(self.net[0].weight)  # type: ignore[index]

        def teardown(self, **kwargs: Any) -> None:
            seen.append(("teardown", kwargs))

        def on_fit_start(self) -> None:
            seen.append(("grad", self.net[0].weight.grad is None))  # type: ignore[index]

        def on_train_start(self) -> None:
            seen.append(("grad", self.net[0].weight.grad is None))  # type: ignore[index]

    quiet(tmp_path, max_steps=1).fit(Keywords(), loader(regression_data(16)))
    assert seen == [("setup", {"stage": "fit"}), ("grad", False), ("grad", True), ("teardown", {"stage": "fit"})]


def test_evaluation_restores_each_submodules_mode_unless_the_module_overrides_model_train(tmp_path: Path) -> None:
    class Frozen(Forward):
        def __init__(self) -> None:
            super().__init__()
            self.net[0].eval()  # type: ignore[index]

    module = Frozen()
    quiet(tmp_path).validate(module, loader(regression_data(16)), verbose=False)
    quiet(tmp_path).predict(module, loader(torch.randn(16, 8)))
    assert module.training and not module.net[0].training  # type: ignore[index]

    class Overrides(Frozen):
        def on_validation_model_train(self) -> None:
            self.train()  # its own choice: everything in train mode

    module = Overrides()
    quiet(tmp_path).validate(module, loader(regression_data(16)), verbose=False)
    assert module.net[0].training  # type: ignore[index]
