"""TensorBoardLogger's Lightning arguments: log_graph, default_hp_metric, prefix, sub_dir, the SummaryWriter's own
keyword arguments, and tensorboardX where tensorboard is not installed."""

from __future__ import annotations

import glob
import importlib
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.models import Regressor, loader, quiet, regression_data
from trainer.exceptions import MisconfigurationException
from trainer.loggers import TensorBoardLogger

TB_MODULE = importlib.import_module("trainer.loggers.tensorboard")
BUILD_MODULE = importlib.import_module("trainer.loggers.build")


def _events(log_dir: str) -> list[Any]:
    loader_module = pytest.importorskip("tensorboard.backend.event_processing.event_file_loader")
    (event_file,) = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    return list(loader_module.EventFileLoader(event_file).Load())


def _scalar_tags(log_dir: str) -> set[str]:
    return {v.tag for e in _events(log_dir) if e.HasField("summary") for v in e.summary.value}


class Traced(Regressor):
    """A module with a ``forward`` and an example input, as Lightning's graph logging needs."""

    def __init__(self) -> None:
        super().__init__()
        self.example_input_array = torch.zeros(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_log_graph_draws_the_module_at_fit_start(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(save_dir=tmp_path, log_graph=True)
    quiet(tmp_path, logger=logger, max_steps=2, log_every_n_steps=1).fit(Traced(), loader(regression_data(16)))
    assert sum(e.HasField("graph_def") for e in _events(logger.log_dir)) == 1

    unset = TensorBoardLogger(save_dir=tmp_path, name="off")  # log_graph=False (the default): no graph
    quiet(tmp_path, logger=unset, max_steps=2, log_every_n_steps=1).fit(Traced(), loader(regression_data(16)))
    assert not any(e.HasField("graph_def") for e in _events(unset.log_dir))


def test_log_graph_without_an_example_input_warns_and_trains(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(save_dir=tmp_path, log_graph=True)
    with pytest.warns(UserWarning, match="Could not log computational graph to TensorBoard"):
        quiet(tmp_path, logger=logger, max_steps=1).fit(Regressor(), loader(regression_data(8)))


def test_prefix_sub_dir_and_no_default_hp_metric(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(save_dir=tmp_path, name="tb", prefix="stage1", sub_dir="images", default_hp_metric=False)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    assert logger.log_dir == str(tmp_path / "tb" / "version_0" / "images")
    assert _scalar_tags(logger.log_dir) == {"stage1-loss"}  # no hp_metric, no HPARAMS summaries without metrics

    with_metric = TensorBoardLogger(save_dir=tmp_path, name="hp")  # default_hp_metric=True: hp_metric -1
    with_metric.log_hyperparams({"lr": 0.1})
    with_metric.finalize("success")
    assert "hp_metric" in _scalar_tags(with_metric.log_dir)


def test_writer_keyword_arguments_reach_the_summary_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    seen: dict[str, Any] = {}
    real = TB_MODULE._tensorboard().SummaryWriter

    def writer(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(TB_MODULE._tensorboard(), "SummaryWriter", writer)
    logger = TensorBoardLogger(save_dir=tmp_path, flush_secs=7, max_queue=3)
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    assert seen["flush_secs"] == 7 and seen["max_queue"] == 3 and seen["log_dir"] == logger.log_dir


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match=r"log_graph='yes'"):
        TensorBoardLogger(save_dir=tmp_path, log_graph="yes")  # type: ignore[arg-type]
    with pytest.raises(MisconfigurationException, match=r"log_dir=.*Pass save_dir"):
        TensorBoardLogger(save_dir=tmp_path, log_dir="elsewhere")


@pytest.fixture
def only_tensorboardx(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """tensorboard "not installed", tensorboardX installed: a stand-in module that records its writers and writes
    with torch's writer (tensorboardX's API)."""
    pytest.importorskip("tensorboard")
    import lightning_utilities.core.imports as imports
    import torch.utils.tensorboard as torch_tb

    created: list[dict[str, Any]] = []

    def summary_writer(**kwargs: Any) -> Any:
        created.append(kwargs)
        return torch_tb.SummaryWriter(**kwargs)

    fake = types.ModuleType("tensorboardX")
    fake.SummaryWriter = summary_writer  # type: ignore[attr-defined]
    fake.summary = importlib.import_module("torch.utils.tensorboard.summary")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorboardX", fake)
    monkeypatch.setitem(sys.modules, "tensorboardX.summary", fake.summary)
    monkeypatch.setattr(imports, "RequirementCache", lambda name: name == "tensorboardX")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            None if name == "tensorboard" else (object() if name == "tensorboardX" else real_find_spec(name, *a))
        ),
    )
    TB_MODULE._backend.cache_clear()
    BUILD_MODULE.tensorboard_available.cache_clear()
    yield created
    TB_MODULE._backend.cache_clear()
    BUILD_MODULE.tensorboard_available.cache_clear()


def test_tensorboardx_counts_as_tensorboard(tmp_path: Path, only_tensorboardx: list[dict[str, Any]]) -> None:
    fit = quiet(tmp_path, logger=True, max_steps=1, log_every_n_steps=1)
    assert isinstance(fit.logger, TensorBoardLogger)  # the default logger, as with tensorboard
    fit.logger.experiment.add_text("note", "written through tensorboardX", 0)  # Lightning's GAN example's call
    fit.fit(Regressor(), loader(regression_data(8)))
    assert only_tensorboardx and only_tensorboardx[0]["log_dir"] == fit.logger.log_dir
    assert "train_loss" in _scalar_tags(fit.logger.log_dir)
