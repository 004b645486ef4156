"""The Trainer's surface as Lightning's tests read it: its state, flags, defaults and properties (issue 33).

Each test is a behaviour a ported Lightning script relies on; the Lightning test that showed the difference is
named in its docstring.
"""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.accelerators import CPUAccelerator, CUDAAccelerator, XLAAccelerator
from trainer.exceptions import MisconfigurationException
from trainer.states import RunningStage, TrainerFn, TrainerState, TrainerStatus
from trainer.user_warnings import PossibleUserWarning


def data() -> Any:
    return loader(regression_data(32), batch_size=8)


# ---- trainer.state ------------------------------------------------------------------------------------------
def test_state_starts_initializing_runs_and_finishes(tmp_path: Path) -> None:
    """trainer/test_states.py: the status and the enums, equal to their strings."""
    fit = quiet(tmp_path, max_steps=2)
    assert fit.state == TrainerState(status=TrainerStatus.INITIALIZING, fn=None, stage=None)
    seen: list[tuple[Any, Any, Any]] = []

    class Watch(trainer.Callback):
        def on_train_batch_start(self, t: Any, *args: Any) -> None:
            seen.append((t.state.status, t.state.fn, t.state.stage))

    fit.callbacks.append(Watch())
    fit.fit(Regressor(), data())
    assert seen[0] == (TrainerStatus.RUNNING, TrainerFn.FITTING, RunningStage.TRAINING)
    assert seen[0] == ("running", "fit", "train")  # each member equals its string
    assert fit.state.finished and fit.state.fn == "fit" and fit.state.stage is None and not fit.interrupted
    assert RunningStage.SANITY_CHECKING.dataloader_prefix == "val" and RunningStage.TESTING.evaluating


def test_an_exception_leaves_the_state_interrupted(tmp_path: Path) -> None:
    class Broken(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("broken step")

    fit = quiet(tmp_path, max_steps=2)
    with pytest.raises(RuntimeError, match="broken step"):
        fit.fit(Broken(), data())
    assert fit.interrupted and fit.state.status == TrainerStatus.INTERRUPTED


# ---- flags --------------------------------------------------------------------------------------------------
def test_max_epochs_unset_warns_and_reads_1000_once_fit_starts(tmp_path: Path) -> None:
    """trainer/test_trainer.py::test_trainer_max_steps_and_epochs_fit_loop_done: None until fit, -1 kept."""

    class StopAtOnce(trainer.Callback):
        def on_train_batch_end(self, t: Any, *args: Any) -> None:
            t.should_stop = True

    fit = quiet(tmp_path, limit_train_batches=1, callbacks=[StopAtOnce()])
    assert fit.max_epochs is None
    assert quiet(tmp_path, max_epochs=-1).max_epochs == -1
    with pytest.warns(PossibleUserWarning, match="`max_epochs` was not set. Setting it to 1000 epochs"):
        fit.fit(Regressor(), data())
    assert fit.max_epochs == 1000
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="`max_epochs` was not set")
        stepped = quiet(tmp_path, max_steps=1)
        stepped.fit(Regressor(), data())  # max_steps bounds the run: no warning, no epoch limit
    assert stepped.max_epochs == -1


@pytest.mark.parametrize(
    ("flags", "error", "match"),
    [
        (dict(max_epochs=-100), MisconfigurationException, "`max_epochs` must be a non-negative integer or -1"),
        (dict(max_steps=-2), MisconfigurationException, "`max_steps` must be a non-negative integer or -1"),
        (dict(gradient_clip_val=(1, 2)), TypeError, "`gradient_clip_val` should be an int or a float"),
        (
            dict(gradient_clip_algorithm="norm2"),
            MisconfigurationException,
            "`gradient_clip_algorithm` norm2 is invalid",
        ),
        (dict(check_val_every_n_epoch=1.2), MisconfigurationException, "should be an integer"),
    ],
)
def test_bad_flags_raise_lightnings_types_and_name_the_value(flags: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        trainer.Trainer(**flags)


def test_misconfiguration_is_a_value_error() -> None:
    """Code written against steadytrain's earlier ValueErrors keeps catching them."""
    with pytest.raises(ValueError, match="accelerator="):
        trainer.Trainer(accelerator="tpu-v9")


def test_none_takes_the_default_as_in_lightning() -> None:
    fit = trainer.Trainer(
        num_sanity_val_steps=None, log_every_n_steps=None, gradient_clip_algorithm=None, default_root_dir=None
    )
    assert (fit.num_sanity_val_steps, fit.log_every_n_steps, fit.gradient_clip_algorithm) == (2, 50, None)
    assert fit.default_root_dir == os.getcwd()
    assert trainer.Trainer(num_sanity_val_steps=-1).num_sanity_val_steps == float("inf")


def test_the_default_logger_writes_lightning_logs_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fit = trainer.Trainer(max_steps=1, enable_progress_bar=False, enable_model_summary=False)
    fit.fit(Regressor(), data())
    assert fit.log_dir == str(tmp_path / "lightning_logs" / "version_0")
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints").is_dir()


# ---- devices ------------------------------------------------------------------------------------------------
def test_accelerator_instances_and_device_properties() -> None:
    fit = trainer.Trainer(accelerator=CPUAccelerator(), devices=1)
    assert isinstance(fit.accelerator, CPUAccelerator) and fit.strategy.root_device.type == "cpu"
    assert (fit.num_devices, fit.device_ids, fit.node_rank, fit.distributed_sampler_kwargs) == (1, [0], 0, None)
    assert CPUAccelerator.is_available() and not XLAAccelerator.is_available()
    assert CUDAAccelerator.is_available() == torch.cuda.is_available()
    with pytest.raises(MisconfigurationException, match="does not run on TPUs"):
        XLAAccelerator()
    assert set(CPUAccelerator().get_device_stats("cpu")) == {"cpu_percent", "cpu_vm_percent", "cpu_swap_percent"}


# ---- evaluation keeps each module's mode, under no_grad -------------------------------------------------------
class Frozen(Regressor):
    """models/test_hooks.py::test_train_eval_mode_restored: a frozen submodule stays in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = torch.nn.Linear(2, 2).eval().requires_grad_(False)
        self.grad_in_hooks: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        assert self.net.training and not self.frozen.training
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        assert not self.net.training and not self.frozen.training
        super().validation_step(batch, batch_idx)

    def on_validation_start(self) -> None:
        self.grad_in_hooks.append(torch.is_grad_enabled())

    def on_validation_end(self) -> None:
        self.grad_in_hooks.append(torch.is_grad_enabled())


def test_evaluation_restores_each_submodules_mode_and_runs_its_hooks_without_grad(tmp_path: Path) -> None:
    model = Frozen()
    fit = quiet(tmp_path, max_epochs=2, limit_train_batches=2, inference_mode=False)
    with pytest.warns(PossibleUserWarning, match="Found 1 module\\(s\\) in eval mode at the start of training"):
        fit.fit(model, data(), data())
    assert model.net.training and not model.frozen.training
    assert model.grad_in_hooks and not any(model.grad_in_hooks)  # trainer/flags/test_inference_mode.py


# ---- what the Trainer shows ---------------------------------------------------------------------------------
def test_lightnings_trainer_properties(tmp_path: Path) -> None:
    fit = quiet(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1, limit_test_batches=0.5)
    assert (fit.limit_train_batches, fit.limit_val_batches, fit.limit_test_batches) == (2, 1, 0.5)
    assert fit.limit_predict_batches is None and fit.scaler is None and fit.early_stopping_callbacks == []

    class Tested(Regressor):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.validation_step(batch, batch_idx)

    model = Tested()
    fit.fit(model, data(), data())
    assert fit.enable_validation and not fit.evaluating and not fit.received_sigterm
    fit.test(model, data(), verbose=False)
    assert fit.num_test_batches == [2] and isinstance(fit.test_dataloaders, torch.utils.data.DataLoader)  # as given
    with fit.init_module():
        made = torch.nn.Linear(2, 2)
    assert made.weight.device.type == "cpu"


def test_hparams_files_round_trip(tmp_path: Path) -> None:
    """core/test_saving.py: Lightning's core.saving functions, YAML read safely."""
    from argparse import Namespace

    from trainer.saving import (
        load_hparams_from_tags_csv,
        load_hparams_from_yaml,
        save_hparams_to_tags_csv,
        save_hparams_to_yaml,
    )

    hparams = Namespace(batch_size=32, learning_rate=0.001, data_root="./any/path/here")
    save_hparams_to_yaml(tmp_path / "h.yaml", hparams, use_omegaconf=False)
    assert load_hparams_from_yaml(tmp_path / "h.yaml", use_omegaconf=False) == vars(hparams)
    save_hparams_to_tags_csv(tmp_path / "h.csv", hparams)
    assert load_hparams_from_tags_csv(tmp_path / "h.csv") == vars(hparams)
    (tmp_path / "evil.yaml").write_text("x: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(Exception, match="could not determine a constructor"):
        load_hparams_from_yaml(tmp_path / "evil.yaml", use_omegaconf=False)


# ---- Trainer.__init__ as Lightning's signature ---------------------------------------------------------------
def test_lightnings_none_defaults_mean_on(tmp_path: Path) -> None:
    """Lightning's Trainer defaults logger/enable_*/precision to None and reads None as its default."""
    fit = trainer.Trainer(
        logger=None, enable_progress_bar=None, enable_checkpointing=None, enable_model_summary=None, precision=None
    )
    assert fit.logger is not None and fit.checkpoint_callback is not None
    assert fit.progress_bar_callback is not None
    off = trainer.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert (off.logger, off.checkpoint_callback, off.progress_bar_callback) == (None, None, None)


@pytest.mark.parametrize("value", [True, "warn"])
def test_deterministic_true_raises_and_warn_warns(value: Any) -> None:
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        trainer.Trainer(deterministic=value)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled() == (value == "warn")
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_bad_deterministic_and_model_registry_are_refused_by_name() -> None:
    with pytest.raises(MisconfigurationException, match=r"deterministic='always'.*'warn'"):
        trainer.Trainer(deterministic="always")
    with pytest.raises(MisconfigurationException, match="model_registry='hub-name'"):
        trainer.Trainer(model_registry="hub-name")


def test_enable_autolog_hparams_false_gives_the_logger_no_hparams(tmp_path: Path) -> None:
    import yaml

    class Saved(Regressor):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters()

    for autolog in (True, False):
        fit = trainer.Trainer(
            default_root_dir=tmp_path / str(autolog),
            max_steps=1,
            enable_autolog_hparams=autolog,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        fit.fit(Saved(), data())
        written = Path(fit.log_dir) / "hparams.yaml"  # TensorBoardLogger writes an empty one, as Lightning's
        assert ("width" in (yaml.safe_load(written.read_text()) or {})) == autolog


def test_trainer_takes_every_parameter_of_lightnings() -> None:
    """A Lightning 2.6.6 `fit --print_config` YAML lists every Trainer parameter; each is one of ours."""
    import inspect

    import yaml

    config = yaml.safe_load((Path(__file__).parent / "cli_fixtures" / "lightning_2_6_6_print_config.yaml").read_text())
    ours = set(inspect.signature(trainer.Trainer.__init__).parameters)
    assert set(config["trainer"]) <= ours


def test_save_checkpoint_before_any_stage_says_a_model_must_be_attached(tmp_path: Path) -> None:
    with pytest.raises(AttributeError, match=r"only possible if a model is attached.*'x.ckpt'"):
        trainer.Trainer().save_checkpoint("x.ckpt")
    assert not Path("x.ckpt").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt", reason="POSIX signals")
def test_a_sigterm_handler_the_program_installed_still_runs(tmp_path: Path) -> None:
    """connectors/test_signal_connector.py: fit saves and stops on SIGTERM, and the user's own handler runs too."""
    from trainer.exceptions import SIGTERMException

    ran = []
    previous = signal.signal(signal.SIGTERM, lambda *_: ran.append(True))

    class Terminated(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            os.kill(os.getpid(), signal.SIGTERM)
            return super().training_step(batch, batch_idx)

    fit = trainer.Trainer(default_root_dir=tmp_path, max_epochs=1, enable_progress_bar=False)
    try:
        with pytest.raises(SIGTERMException):
            fit.fit(Terminated(), data())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert fit.received_sigterm and ran == [True]


def test_trainer_model_is_none_before_any_stage() -> None:
    assert trainer.Trainer().model is None
