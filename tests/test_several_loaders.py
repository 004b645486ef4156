"""Several validation, test and predict loaders: ``dataloader_idx``, per-loader metrics (exact means,
also under DDP with uneven loaders), one prediction list per loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.helpers import REPO_ROOT, run_python
from tests.models import Regressor, loader, quiet, regression_data

SCRIPT = REPO_ROOT / "tests" / "scripts" / "several_loaders.py"


class PerLoader(Regressor):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)  # over both ranks
        self.log("seen", float(len(x)), reduce_fx="sum", sync_dist=True)
        self.log("all_loss", torch.nn.functional.mse_loss(self.net(x), y), add_dataloader_idx=False, sync_dist=True)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.validation_step(batch, batch_idx, dataloader_idx)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return (dataloader_idx, self.net(batch[0]))


def loaders() -> list[DataLoader[Any]]:
    return [loader(regression_data(13, seed=1), batch_size=4), loader(regression_data(7, seed=2), batch_size=4)]


def test_each_loader_gets_its_own_exact_metrics_and_the_step_its_index(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module, fit = PerLoader(), quiet(tmp_path)
    alone = [fit.validate(module, dl, verbose=False)[0] for dl in loaders()]
    both = fit.validate(module, loaders(), verbose=False)
    assert both[0]["val_loss/dataloader_idx_0"] == pytest.approx(alone[0]["val_loss"], rel=1e-12)
    assert both[1]["val_loss/dataloader_idx_1"] == pytest.approx(alone[1]["val_loss"], rel=1e-12)
    assert (both[0]["seen/dataloader_idx_0"], both[1]["seen/dataloader_idx_1"]) == (13, 7)
    assert "val_loss/dataloader_idx_1" not in both[0]  # each dict holds its own loader's keys ...
    pooled = (alone[0]["val_loss"] * 13 + alone[1]["val_loss"] * 7) / 20
    assert both[0]["all_loss"] == both[1]["all_loss"] == pytest.approx(pooled, rel=1e-6)  # float32 ... and the shared


def test_a_dict_of_loaders_is_several_loaders_in_its_order(tmp_path: Path) -> None:
    module, fit = PerLoader(), quiet(tmp_path)
    first, second = loaders()
    results = fit.test(module, {"easy": first, "hard": second}, verbose=False)
    assert [r[f"seen/dataloader_idx_{i}"] for i, r in enumerate(results)] == [13, 7]


def test_predict_returns_one_list_per_loader(tmp_path: Path) -> None:
    predictions = quiet(tmp_path).predict(PerLoader(), loaders())
    assert predictions is not None and len(predictions) == 2
    assert [len(p) for p in predictions] == [4, 2]  # batches of 4: 13 and 7 samples
    assert {index for index, _ in predictions[1]} == {1}
    assert quiet(tmp_path).predict(PerLoader(), loaders(), return_predictions=False) is None


def test_fit_validates_every_loader_and_a_checkpoint_can_monitor_one(tmp_path: Path) -> None:
    cb = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss/dataloader_idx_1", save_top_k=1)
    fit = quiet(tmp_path, max_epochs=2, enable_checkpointing=True, callbacks=[cb])
    fit.fit(PerLoader(), loader(regression_data(32)), loaders())
    assert {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1", "all_loss"} <= set(fit.callback_metrics)
    best = torch.load(cb.best_model_path, weights_only=True)["callbacks"][cb.state_key]
    assert best["best_model_score"] == cb.best_model_score <= float(fit.callback_metrics["val_loss/dataloader_idx_1"])


def test_a_step_that_cannot_tell_loaders_apart_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        RuntimeError, match=r"You provided multiple `val_dataloader`, but no `dataloader_idx`.*dataloader_idx=0"
    ):
        quiet(tmp_path).validate(Regressor(), loaders())

    class Needs(Regressor):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int) -> None: ...

    with pytest.raises(
        TypeError, match=r"You provided only a single `val_dataloader`, but have included `dataloader_idx`"
    ):
        quiet(tmp_path).validate(Needs(), loaders()[0])


@pytest.mark.slow
def test_two_ranks_with_uneven_loaders_give_each_loader_s_exact_mean(tmp_path: Path) -> None:
    """13 and 7 samples over 2 ranks: unpadded shards and summed (total, count); Lightning pads and is
    off by 0.014 on such a case."""
    done = run_python([str(SCRIPT), str(tmp_path)], timeout=120)
    assert done.returncode == 0, done.output
    torch.manual_seed(0)
    single = quiet(tmp_path).validate(PerLoader(), loaders(), verbose=False)
    for rank in (0, 1):
        ddp = torch.load(tmp_path / f"results-rank{rank}.pt", weights_only=True)
        for i in (0, 1):
            assert ddp[i][f"seen/dataloader_idx_{i}"] == single[i][f"seen/dataloader_idx_{i}"] == (13, 7)[i]
            # Each batch's mean is a float32 and the ranks batch the samples differently: rounding only.
            key = f"val_loss/dataloader_idx_{i}"
            assert ddp[i][key] == pytest.approx(single[i][key], rel=1e-6), (rank, key)
        assert ddp[0]["all_loss"] == pytest.approx(single[0]["all_loss"], rel=1e-6)
