"""Lightning behaviours of the Trainer and its callbacks that ported Lightning projects rely on: a finished Trainer
pickles, progress bars show the epoch-end metrics, and the callback hooks a project overrides get their arguments."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch

from tests.models import Regressor, loader, quiet, regression_data


def test_a_fitted_trainer_and_its_module_pickle_and_load(tmp_path: Path) -> None:
    run = quiet(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    module = Regressor()
    run.fit(module, loader(regression_data(32)), {"a": loader(regression_data(16))})
    buffer = io.BytesIO()
    torch.save(run, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    optimizer = loaded.lightning_module.optimizers()
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.param_groups[0]["lr"] == module.lr
    assert pickle.loads(pickle.dumps(module)).lr == module.lr
