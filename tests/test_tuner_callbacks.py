"""The searches as Lightning runs them: from the ``BatchSizeFinder`` / ``LearningRateFinder`` callbacks during the
stage they tune (which then goes on with the value found), and through ``Tuner``, which leaves the Trainer as
after that stage."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import assert_bitwise_equal, params, quiet, regression_data
from tests.test_tuner import Tunable
from trainer.callbacks import BatchSizeFinder, LearningRateFinder
from trainer.tuner import Tuner


class Recorded(Tunable):
    """Notes the size of each batch each stage's step sees."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.seen: dict[str, list[int]] = {"train": [], "val": []}

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen["train"].append(batch[0].shape[0])
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.seen["val"].append(batch[0].shape[0])
        super().validation_step(batch, batch_idx)


def test_batch_size_finder_fit_goes_on_with_the_size_found(tmp_path: Path) -> None:
    torch.manual_seed(1)
    direct = Tunable(batch_size=16)
    quiet(tmp_path, max_epochs=1).fit(direct)
    torch.manual_seed(1)
    model = Recorded(oom_above=20)
    finder = BatchSizeFinder(max_trials=5)
    run = quiet(tmp_path, max_epochs=1, callbacks=[finder])
    run.fit(model)
    assert finder.optimal_batch_size == model.batch_size == 16
    assert run.global_step == 256 // 16 and run.train_dataloader.batch_size == 16  # type: ignore[union-attr]
    assert model.seen["train"][-16:] == [16] * 16  # the fit's own batches, after the trials'
    assert_bitwise_equal(params(direct), params(model))  # the trials left nothing behind, the RNG included


def test_batch_size_finder_on_validate_runs_the_stage_at_the_size_found(tmp_path: Path) -> None:
    model = Recorded(oom_above=20)
    results = quiet(tmp_path, callbacks=[BatchSizeFinder(max_trials=5, steps_per_trial=1)]).validate(model)
    assert model.batch_size == 16 and model.seen["val"][-4:] == [16] * 4  # 64 samples: the stage's 4 batches
    assert results == [{}]


def test_batch_size_finder_from_another_hook(tmp_path: Path) -> None:
    """Lightning's example: a subclass that searches at chosen epochs instead of at the start of fit."""

    class AtEpochs(BatchSizeFinder):
        def on_fit_start(self, trainer: object, pl_module: object) -> None:
            return

        def on_train_epoch_start(self, trainer: trainer.Trainer, pl_module: trainer.Module) -> None:
            if trainer.current_epoch == 1:
                self.scale_batch_size(trainer, pl_module)

    model = Recorded(oom_above=40)
    run = quiet(tmp_path, max_epochs=3, callbacks=[AtEpochs(max_trials=3, init_val=8)])
    run.fit(model)
    assert model.batch_size == 32 and run.current_epoch == 3
    assert model.seen["train"][-8:] == [32] * 8  # epoch 2: 256 samples in batches of 32


def test_learning_rate_finder_fit_goes_on_with_the_suggestion(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Tunable()
    finder = LearningRateFinder(num_training_steps=30)
    run = quiet(tmp_path, max_epochs=1, callbacks=[finder])
    run.fit(model)
    assert finder.optimal_lr is not None
    suggestion = finder.optimal_lr.suggestion()
    assert suggestion is not None and model.lr == suggestion
    assert run.optimizers[0].param_groups[0]["lr"] == suggestion
    torch.manual_seed(1)
    direct = Tunable(lr=suggestion)
    quiet(tmp_path, max_epochs=1).fit(direct)
    assert_bitwise_equal(params(direct), params(model))


def test_tuner_leaves_the_trainer_as_after_the_stage(tmp_path: Path) -> None:
    class Data(trainer.DataModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 4

        def train_dataloader(self) -> DataLoader:
            return DataLoader(regression_data(256), batch_size=self.batch_size)

    data, run = Data(), quiet(tmp_path, max_epochs=1)
    found = Tuner(run).scale_batch_size(Tunable(oom_above=20), datamodule=data, mode="binsearch", margin=0.0)
    assert found == data.batch_size == 20
    assert run.datamodule is data and run.train_dataloader.batch_size == 20  # type: ignore[union-attr]
    assert run.global_step == 0 and run.callbacks == quiet(tmp_path).callbacks


def test_tuner_logs_each_size_it_tries(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        found = Tuner(quiet(tmp_path)).scale_batch_size(Tunable(), max_trials=4, init_val=64, steps_per_trial=1)
    assert found == 256
    assert caplog.text.count("trying batch size") == 2 and "greater or equal than the length" in caplog.text


def test_tuner_refuses_a_trainer_that_runs_the_finder_already(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="already configured with a `BatchSizeFinder`"):
        Tuner(quiet(tmp_path, callbacks=[BatchSizeFinder()])).scale_batch_size(Tunable())
    with pytest.raises(ValueError, match="already configured with a `LearningRateFinder`"):
        Tuner(quiet(tmp_path, callbacks=[LearningRateFinder()])).lr_find(Tunable())


def test_zero_trials_keep_the_initial_size(tmp_path: Path) -> None:
    assert Tuner(quiet(tmp_path)).scale_batch_size(Tunable(), max_trials=0, init_val=4) == 4


def test_lightnings_errors_for_what_a_search_cannot_tune(tmp_path: Path) -> None:
    class TwoOptimizers(Tunable):
        def configure_optimizers(self) -> list[torch.optim.Optimizer]:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.parameters())]

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
            return None

    model = TwoOptimizers()
    model.automatic_optimization = False
    with pytest.raises(ValueError, match="only works with single optimizer"):
        Tuner(quiet(tmp_path)).lr_find(model)
    with pytest.raises(ValueError, match="cannot be used with multiple val dataloaders"):
        several = Tunable()
        several.val_dataloader = lambda: [Tunable().val_dataloader()] * 2  # type: ignore[method-assign]
        Tuner(quiet(tmp_path)).scale_batch_size(several, method="validate")
    with pytest.raises(ValueError, match="not supported with distributed strategies"):
        BatchSizeFinder().setup(trainer.Trainer(accelerator="cpu", devices=2, strategy="ddp"), Tunable())
    with pytest.raises(ValueError, match="`mode` should be either of"):
        BatchSizeFinder(mode="linear")
