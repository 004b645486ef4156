"""Where ``self.log`` works, as in Lightning: stage hooks refuse it, once-per-epoch hooks log epoch values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.models import Regressor, loader
from tests.test_logging import Logs, quiet, ten
from trainer.exceptions import MisconfigurationException


class LogsIn(Regressor):
    """Logs ``loss`` from ``hook`` with ``options``."""

    def __init__(self, hook: str, **options: Any) -> None:
        super().__init__()
        self.where, self.options = hook, options
        setattr(self, hook, self._log)

    def _log(self, *args: Any, **kwargs: Any) -> None:
        self.log("loss", 1.0, **self.options)


@pytest.mark.parametrize("hook", ["on_fit_start", "on_train_end", "setup"])
def test_a_stage_hook_refuses_self_log(tmp_path: Path, hook: str) -> None:
    with pytest.raises(MisconfigurationException, match=rf"You can't `self\.log\('loss', \.\.\.\)` inside `{hook}`"):
        quiet(tmp_path).fit(LogsIn(hook), loader(ten(), batch_size=5))


def test_an_epoch_hook_refuses_step_values(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match=r"inside `on_train_epoch_end`: it runs once per epoch"):
        quiet(tmp_path).fit(LogsIn("on_train_epoch_end", on_step=True), loader(ten(), batch_size=5))


def test_on_train_start_logs_into_the_first_epoch(tmp_path: Path) -> None:
    fit = quiet(tmp_path)
    fit.fit(LogsIn("on_train_start"), loader(ten(), batch_size=5))
    assert fit.callback_metrics["loss"].item() == 1.0


def test_one_name_twice_with_other_options_is_refused(tmp_path: Path) -> None:
    module = Logs(train=[("x", "idx", dict(prog_bar=True)), ("x", "idx", dict(prog_bar=False))])
    with pytest.raises(MisconfigurationException, match=r"`self\.log\(x, \.\.\.\)` twice in `training_step`"):
        quiet(tmp_path).fit(module, loader(ten(), batch_size=5))


class TwoLoaders(Regressor):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("v", float(batch_idx + 1), on_step=True, on_epoch=True)


def test_dataloader_idx_follows_the_step_and_epoch_suffix(tmp_path: Path) -> None:
    fit = quiet(tmp_path)
    module = TwoLoaders()
    fit.validate(module, [loader(ten(), batch_size=5), loader(ten(), batch_size=5)])
    assert {"v_epoch/dataloader_idx_0", "v_epoch/dataloader_idx_1"} <= set(fit.callback_metrics)
    assert isinstance(fit.callback_metrics["v_epoch/dataloader_idx_0"], torch.Tensor)
