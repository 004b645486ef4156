"""The Strategy contract, run against every one-process strategy, including one registered from outside.

``register_strategy("mine", "tests.strategies.custom:MyStrategy")`` adds a strategy the package has
never seen; the same tests run on it as on the built-in ``single``, so a strategy is one file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import Regressor, regression_data
from trainer.strategies import STRATEGIES, Strategy, register_strategy, strategy_class

NAMES = ["single", "mine"]


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    register_strategy("mine", "tests.strategies.custom:MyStrategy")
    yield
    STRATEGIES.pop("mine", None)


def built(name: str) -> Strategy:
    strategy = strategy_class(name)()
    strategy.configure("cpu", [0])
    return strategy


def fit(name: str, root: Path, steps: int = 6, ckpt_path: str | None = None) -> tuple[trainer.Trainer, Regressor]:
    trainer.seed_everything(0)
    module = Regressor(dropout=0.1)
    run = trainer.Trainer(
        strategy=name,
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[trainer.ModelCheckpoint(dirpath=root / "ckpts", every_n_train_steps=3, save_top_k=-1)],
    )
    loader = DataLoader(regression_data(48), batch_size=8, shuffle=True)
    run.fit(module, loader, DataLoader(regression_data(16, seed=1), batch_size=8), ckpt_path=ckpt_path)
    return run, module


@pytest.mark.parametrize("name", NAMES)
def test_collectives_keep_one_process_values(name: str) -> None:
    strategy = built(name)
    value = torch.tensor([1.0, 2.0])
    assert torch.equal(strategy.all_reduce(value, "sum"), value)
    assert torch.equal(strategy.all_reduce(value, "mean"), value)
    assert strategy.all_gather(value).shape == (strategy.world_size, 2)
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.gather_objects({"a": 1}) == [{"a": 1}]
    assert strategy.reduce_boolean_decision(True) and not strategy.reduce_boolean_decision(False)
    strategy.barrier()
    assert (strategy.global_rank, strategy.world_size, strategy.is_global_zero) == (0, 1, True)


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_is_the_users_module_on_the_root_device(name: str) -> None:
    strategy = built(name)
    module = Regressor()
    strategy.setup_module(module)
    assert list(strategy.module_state_dict()) == list(module.state_dict())
    assert all(p.device == strategy.root_device for p in module.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_fit_trains_and_resumes_exactly(name: str, tmp_path: Path) -> None:
    """The same numbers as the built-in single-device strategy, and a resume from step 3 ends equal."""
    _, reference = fit("single", tmp_path / "reference")
    run, module = fit(name, tmp_path / "straight")
    assert type(run.strategy) is strategy_class(name)
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), reference.parameters(), strict=True))
    (step3,) = (tmp_path / "straight" / "ckpts").glob("*step=3.ckpt")
    _, resumed = fit(name, tmp_path / "resumed", ckpt_path=str(step3))
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), module.parameters(), strict=True))


def test_a_registered_strategy_is_reached_only_through_its_hooks(tmp_path: Path) -> None:
    run, _ = fit("mine", tmp_path)
    calls = run.strategy.calls  # type: ignore[attr-defined]
    assert calls["setup_module"] == 1 and calls["save_checkpoint"] >= 2
    assert calls["step_function:training"] >= 1 and calls["step_function:validation"] >= 1
    assert calls["broadcast"] >= 1 and calls["barrier"] >= 1
