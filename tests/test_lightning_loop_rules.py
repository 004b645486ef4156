"""When the fit loop asks for data and validates, and what a skipped step does, as Lightning's tests pin it (issue 33:
trainer/test_dataloaders.py, trainer/flags/test_val_check_interval.py, loops/test_training_loop_flow_scalar.py,
trainer/flags/test_env_vars.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data


class Reloading(Regressor):
    """Records the epochs at which each loader is asked for, and whether the sanity check was running then."""

    def __init__(self) -> None:
        super().__init__()
        self.train_epochs: list[int] = []
        self.val_epochs: list[tuple[int, bool]] = []

    def train_dataloader(self) -> Any:
        self.train_epochs.append(self.current_epoch)
        return loader(regression_data(16), batch_size=8)

    def val_dataloader(self) -> Any:
        self.val_epochs.append((self.current_epoch, self.trainer.sanity_checking))
        return loader(regression_data(8), batch_size=8)


@pytest.mark.parametrize(
    ("sanity", "every_n", "reload_n", "train_expected", "val_expected"),
    [
        (0, 3, 4, [0, 4, 8], [(2, False), (8, False)]),  # requested at the first validation, then when due
        (1, 3, 4, [0, 4, 8], [(0, True), (2, False), (8, False)]),  # the check's request is not epoch 2's
        (1, 1, 1, list(range(10)), [(0, True)] + [(e, False) for e in range(1, 10)]),
    ],
)
def test_loaders_are_asked_for_where_lightning_asks(
    tmp_path: Path, sanity: int, every_n: int, reload_n: int, train_expected: list[int], val_expected: list[Any]
) -> None:
    model = Reloading()
    fit = quiet(
        tmp_path,
        max_epochs=10,
        num_sanity_val_steps=sanity,
        check_val_every_n_epoch=every_n,
        reload_dataloaders_every_n_epochs=reload_n,
    )
    fit.fit(model)
    assert model.train_epochs == train_expected
    assert model.val_epochs == val_expected


def test_time_based_val_check_interval_validates_once_the_time_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning 2.6's ``val_check_interval="DD:HH:MM:SS"``: each read of the clock here moves it 2 s on."""
    clock = itertools.count(0, 2)
    monkeypatch.setattr("trainer.loops.fit_validation.time.monotonic", lambda: next(clock))
    validated: list[int] = []

    class Counting(Regressor):
        def on_validation_start(self) -> None:
            validated.append(self.trainer.global_step)

    fit = quiet(tmp_path, max_steps=5, val_check_interval="00:00:00:02", limit_val_batches=1)
    fit.fit(Counting(), loader(regression_data(64)), loader(regression_data(8)))
    assert validated == [1, 2, 3, 4, 5] and fit.val_check_batch is None
    with pytest.raises(trainer.exceptions.MisconfigurationException, match="should be an integer or a time-based"):
        quiet(tmp_path, val_check_interval=0.5, check_val_every_n_epoch=None)
    with pytest.raises(ValueError, match="val_check_interval='2 hours' is not a duration"):
        quiet(tmp_path, val_check_interval="2 hours")


def test_a_step_returning_none_skips_its_backward_and_warns(tmp_path: Path) -> None:
    """Lightning's rule: the optimizer still steps (on nothing), the global step counts it, a warning says so."""

    class EveryOther(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            return loss if batch_idx % 2 else None

    model = EveryOther()
    fit = quiet(tmp_path, max_epochs=1)
    with pytest.warns(UserWarning, match="`training_step` returned `None`"):
        fit.fit(model, loader(regression_data(32)))
    assert fit.global_step == 4


def test_a_none_batch_runs_no_step_and_warns_once(tmp_path: Path) -> None:
    """A collate_fn that gives None (a batch to drop): Lightning skips the step and on_train_batch_start, and
    on_train_batch_end gets None; the other batches train."""
    from torch.utils.data import DataLoader, default_collate

    calls: list[tuple[str, int, Any]] = []

    class Dropping(Regressor):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            calls.append(("start", batch_idx, None))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            calls.append(("step", batch_idx, None))
            return super().training_step(batch, batch_idx)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            calls.append(("end", batch_idx, None if outputs is None else sorted(outputs)))

    def collate(samples: list[Any]) -> Any:
        return None if float(samples[0][1]) == first_targets[0] else default_collate(samples)

    data = regression_data(32)
    first_targets = [float(data[0][1])]  # the first batch of each epoch is dropped
    fit = quiet(tmp_path, max_epochs=2)
    with pytest.warns(UserWarning, match="train_dataloader yielded None") as caught:
        fit.fit(Dropping(), DataLoader(data, batch_size=8, collate_fn=collate))
    assert sum("yielded None" in str(w.message) for w in caught) == 1  # once per fit
    assert fit.global_step == 6 and fit.current_epoch == 2  # 3 of each epoch's 4 batches stepped
    assert calls[:4] == [("end", 0, None), ("start", 1, None), ("step", 1, None), ("end", 1, ["loss"])]


def test_flags_from_the_environment_and_the_logger_setters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "7")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    fit = trainer.Trainer(default_root_dir=tmp_path)
    assert fit.max_steps == 7 and fit.logger is None
    assert trainer.Trainer(max_steps=42, default_root_dir=tmp_path).max_steps == 42  # given beats the environment
    csv = trainer.loggers.CSVLogger(tmp_path)
    fit.logger = csv
    assert fit.loggers == [csv]
    fit.loggers = None
    assert fit.logger is None
    model = Regressor()
    model.trainer = fit  # Lightning's setter
    assert model.trainer is fit
    assert torch.is_tensor(next(model.parameters()))


def test_ctrl_c_in_a_stage_tears_down_and_exits_with_status_1(tmp_path: Path) -> None:
    """trainer/test_trainer.py::test_on_exception_hook: callbacks see the KeyboardInterrupt, then SystemExit(1)."""
    seen: list[BaseException] = []

    class Interrupt(trainer.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            raise KeyboardInterrupt

        def on_exception(self, t: Any, module: Any, exception: BaseException) -> None:
            seen.append(exception)

    fit = quiet(tmp_path, max_epochs=1, callbacks=[Interrupt()])
    with pytest.raises(SystemExit) as exit_info:
        fit.fit(Regressor(), loader(regression_data(16)))
    assert exit_info.value.code == 1 and fit.interrupted and isinstance(seen[0], KeyboardInterrupt)


def test_should_stop_mid_epoch_counts_the_epoch_and_validates_there(tmp_path: Path) -> None:
    """loops/test_training_loop.py::test_should_stop_mid_epoch (max_steps mid-epoch keeps the position instead)."""
    validated: list[tuple[int, int]] = []

    class Stopping(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 4:
                self.trainer.should_stop = True
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            validated.append((self.trainer.current_epoch, self.trainer.global_step))

    fit = quiet(tmp_path, max_epochs=1, limit_val_batches=1)
    fit.fit(Stopping(), loader(regression_data(80)), loader(regression_data(8)))
    assert (fit.current_epoch, fit.global_step, validated) == (1, 5, [(0, 5)])


def test_evaluation_samplers_are_told_the_epoch(tmp_path: Path) -> None:
    """loops/test_evaluation_loop.py::test_evaluation_loop_sampler_set_epoch_called."""
    told: list[int] = []

    class Sampler(torch.utils.data.SequentialSampler):
        def set_epoch(self, epoch: int) -> None:
            told.append(epoch)

    data = regression_data(8)
    val = torch.utils.data.DataLoader(data, batch_size=8, sampler=Sampler(data))
    fit = quiet(tmp_path, max_epochs=2, num_sanity_val_steps=1)
    fit.fit(Regressor(), loader(regression_data(8)), val)
    assert told == [0, 0, 1]  # the sanity check, then each epoch's validation
    fit.validate(Regressor(), val, verbose=False)
    assert told[-1] == 2


def test_a_trainer_pickles_and_detect_anomaly_names_the_op(tmp_path: Path) -> None:
    import pickle

    assert isinstance(pickle.loads(pickle.dumps(trainer.Trainer(default_root_dir=tmp_path))), trainer.Trainer)

    class Nan(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return super().training_step(batch, batch_idx) * float("nan")

    with pytest.raises(RuntimeError, match="returned nan values"):
        quiet(tmp_path, max_steps=1, detect_anomaly=True).fit(Nan(), loader(regression_data(8)))


# ---- a module lacking what a stage needs: Lightning's errors (trainer/test_config_validator.py) ---------------
@pytest.mark.parametrize(
    ("missing", "call", "match"),
    [
        ("training_step", "fit", r"No `training_step\(\)` method defined"),
        ("configure_optimizers", "fit", r"No `configure_optimizers\(\)` method defined"),
        ("validation_step", "validate", r"No `validation_step\(\)` method defined"),
        ("predict_step", "predict", r"`predict_step` cannot be None"),
        ("forward", "predict", r"requires `forward` method to run"),
    ],
)
def test_a_step_set_to_none_is_lightnings_misconfiguration(tmp_path: Path, missing: str, call: str, match: str) -> None:
    from trainer.exceptions import MisconfigurationException

    module = Regressor()
    setattr(module, missing, None)
    with pytest.raises(MisconfigurationException, match=match):
        getattr(quiet(tmp_path), call)(module, loader(regression_data(16), batch_size=4))


def test_a_module_fit_cannot_train_is_refused_before_any_folder_is_made(tmp_path: Path) -> None:
    """test_config_validator.py: Lightning checks the module before any hook; no lightning_logs is left behind."""
    from trainer.exceptions import MisconfigurationException

    module = Regressor()
    module.automatic_optimization = False
    fit = trainer.Trainer(default_root_dir=tmp_path, gradient_clip_val=1.0, enable_progress_bar=False)
    with pytest.raises(MisconfigurationException, match="Automatic gradient clipping is not supported"):
        fit.fit(module, loader(regression_data(16), batch_size=4))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("output", "manual", "match"),
    [
        (5.0, False, "must return a Tensor, a dict, or None"),
        ({"acc": 1.0}, False, "the 'loss' key needs to be present"),
        (5, True, "must either return a Tensor or have no return"),
    ],
)
def test_a_step_output_the_loop_cannot_use_is_lightnings_misconfiguration(
    tmp_path: Path, output: Any, manual: bool, match: str
) -> None:
    """loops/optimization/test_automatic_loop.py and test_manual_loop.py."""
    from trainer.exceptions import MisconfigurationException

    class Returns(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = not manual

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return output

    with pytest.raises(MisconfigurationException, match=match):
        quiet(tmp_path, max_steps=1).fit(Returns(), loader(regression_data(16), batch_size=4))
