"""Lightning's everyday tools a port imports: ``trainer.utilities`` (rank-zero helpers, ``grad_norm``),
``DeviceStatsMonitor`` and ``GradientAccumulationScheduler``."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.lightning_port import port
from tests.models import Regressor, assert_bitwise_equal, every_step_checkpoints, loader, params, quiet, regression_data
from trainer import Trainer
from trainer.callbacks import DeviceStatsMonitor, GradientAccumulationScheduler
from trainer.launch import rank_from_environment, set_global_rank
from trainer.loggers.base import Logger
from trainer.utilities import grad_norm, rank_zero_info, rank_zero_only, rank_zero_warn


class Memory(Logger):
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))


# ---- trainer.utilities ------------------------------------------------------------------------------------
def test_lightning_utilities_imports_port_to_trainer_utilities() -> None:
    assert port("from lightning.pytorch.utilities import rank_zero_only, grad_norm") == (
        "from trainer.utilities import rank_zero_only, grad_norm"
    )
    assert port("from lightning.pytorch.utilities.rank_zero import rank_zero_info") == (
        "from trainer.utilities import rank_zero_info"
    )
    assert port("from lightning.pytorch.tuner import Tuner") == "from trainer.tuner import Tuner"


def test_rank_zero_helpers_run_on_rank_zero_only(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    calls: list[int] = []
    noted = rank_zero_only(calls.append)
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    noted(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rank_zero_warn("not from rank 1")
    set_global_rank(0)
    noted(0)
    with pytest.warns(UserWarning, match="from rank 0"):
        rank_zero_warn("from rank 0")
    with caplog.at_level("INFO"):
        rank_zero_info("info from rank 0")
    assert calls == [0] and not caught and "info from rank 0" in caplog.text


def test_rank_comes_from_the_launchers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert rank_from_environment() == 0
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("LOCAL_RANK", "2")  # before SLURM_PROCID, which SLURM sets even when it did not launch
    assert rank_from_environment() == 2
    monkeypatch.setenv("RANK", "3")
    assert rank_from_environment() == 3


def test_grad_norm_keys_and_values() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    net(torch.randn(4, 3)).sum().backward()
    net[1].bias.grad = None  # a parameter without a gradient is left out
    norms = grad_norm(net, norm_type=2)
    grads = {name: p.grad for name, p in net.named_parameters() if p.grad is not None}
    assert sorted(norms) == sorted([f"grad_2.0_norm/{n}" for n in grads] + ["grad_2.0_norm_total"])
    assert torch.allclose(norms["grad_2.0_norm/0.weight"], grads["0.weight"].norm())
    total = torch.cat([g.flatten() for g in grads.values()]).norm()
    assert torch.allclose(norms["grad_2.0_norm_total"], total)
    assert "grad_inf_norm_total" in grad_norm(net, "inf")
    with pytest.raises(ValueError, match="positive number or 'inf'"):
        grad_norm(net, 0)


# ---- DeviceStatsMonitor ----------------------------------------------------------------------------------
def test_device_stats_reach_the_loggers_at_logging_steps(tmp_path: Path) -> None:
    memory = Memory()
    fit = quiet(tmp_path, max_epochs=1, logger=memory, log_every_n_steps=2, callbacks=[DeviceStatsMonitor()])
    fit.fit(Regressor(), loader(regression_data(48)), loader(regression_data(16)))  # 6 training batches
    rows = [(step, key) for step, values in memory.rows for key in values if key.startswith("DeviceStatsMonitor.")]
    start = "DeviceStatsMonitor.on_train_batch_start/"
    assert sorted({step for step, key in rows if key.startswith(start)}) == [1, 3, 5]  # (step + 1) % 2 == 0
    keys = {key.split("/", 1)[1] for _, key in rows}
    assert keys == {"cpu_percent", "cpu_vm_percent", "cpu_swap_percent"}
    hooks = {key.split("/", 1)[0] for _, key in rows}
    assert {start[:-1], "DeviceStatsMonitor.on_train_batch_end"} <= hooks
    values = [v for _, row in memory.rows for k, v in row.items() if k.endswith("cpu_vm_percent")]
    assert values and all(0 < v <= 100 for v in values)


def test_device_stats_cpu_stats_false_logs_nothing_on_cpu(tmp_path: Path) -> None:
    memory = Memory()
    fit = quiet(tmp_path, max_epochs=1, logger=memory, log_every_n_steps=1, callbacks=[DeviceStatsMonitor(False)])
    fit.fit(Regressor(), loader(regression_data(16)))
    assert memory.rows and not [k for _, row in memory.rows for k in row if k.startswith("DeviceStatsMonitor")]


def test_device_stats_needs_a_logger(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a logger"):
        quiet(tmp_path, callbacks=[DeviceStatsMonitor()]).fit(Regressor(), loader(regression_data(16)))
    with pytest.raises(ValueError, match="cpu_stats='yes'"):
        DeviceStatsMonitor(cpu_stats="yes")  # type: ignore[arg-type]


@pytest.mark.cuda
def test_device_stats_on_cuda_are_the_allocators(tmp_path: Path) -> None:
    memory = Memory()
    fit = quiet(
        tmp_path,
        accelerator="cuda",
        devices=1,
        max_epochs=1,
        logger=memory,
        log_every_n_steps=1,
        callbacks=[DeviceStatsMonitor()],
    )
    fit.fit(Regressor(), loader(regression_data(16)))
    keys = {k.split("/", 1)[1] for _, row in memory.rows for k in row if k.startswith("DeviceStatsMonitor.")}
    assert "allocated_bytes.all.current" in keys and "cpu_percent" not in keys


# ---- GradientAccumulationScheduler ---------------------------------------------------------------------
def hand_loop(module: Regressor, data: torch.utils.data.DataLoader, schedule: list[int]) -> None:
    """A user's loop whose accumulation changes per epoch (a last partial window averages what it has)."""
    optimizer = module.configure_optimizers()
    module.train()
    total = len(data)
    for accumulate in schedule:
        for i, (x, y) in enumerate(data):
            window = min(accumulate, total - (i - i % accumulate))
            loss = torch.nn.functional.mse_loss(module.net(x), y)
            (loss if window == 1 else loss / window).backward()
            if (i + 1) % accumulate == 0 or i + 1 == total:
                optimizer.step()
                optimizer.zero_grad()


def test_accumulation_schedule_equals_a_hand_loop(tmp_path: Path) -> None:
    ds = regression_data(n=88)  # 11 batches: partial windows for 2, 3 and 4
    torch.manual_seed(1)
    reference = Regressor()
    torch.manual_seed(1)
    ours = Regressor()
    hand_loop(reference, loader(ds), [1, 2, 2, 3, 4])
    scheduler = GradientAccumulationScheduler(scheduling={1: 2, 3: 3, 4: 4})
    fit = quiet(tmp_path, max_epochs=5, callbacks=[scheduler])
    fit.fit(ours, loader(ds))
    assert fit.global_step == 11 + 6 + 6 + 4 + 3 and fit.accumulate_grad_batches == 4
    assert_bitwise_equal(params(reference), params(ours))


def test_accumulation_schedule_lookup_and_validation() -> None:
    scheduler = GradientAccumulationScheduler({2: 4, 5: 1})
    assert [scheduler.get_accumulate_grad_batches(e) for e in range(7)] == [1, 1, 4, 4, 4, 1, 1]
    with pytest.raises(TypeError, match="non-empty dict"):
        GradientAccumulationScheduler({})
    with pytest.raises(ValueError, match=r"Epoch should be an int greater than or equal to 0. Got \[-1\]"):
        GradientAccumulationScheduler({-1: 2})
    with pytest.raises(ValueError, match=r"Accumulation factor should be an int greater than 0. Got \[0\]"):
        GradientAccumulationScheduler({1: 0})


def test_accumulation_schedule_refuses_what_lightning_refuses(tmp_path: Path) -> None:
    schedule = GradientAccumulationScheduler({1: 2})
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2\) and a GradientAccumulationScheduler"):
        quiet(tmp_path, max_epochs=2, callbacks=[schedule], accumulate_grad_batches=2).fit(
            Regressor(), loader(regression_data(16))
        )

    class Manual(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            self.manual_backward(torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))
            self.optimizers().step()

    with pytest.raises(RuntimeError, match="manual optimization"):
        quiet(tmp_path, max_epochs=2, callbacks=[GradientAccumulationScheduler({1: 2})]).fit(
            Manual(), loader(regression_data(16))
        )


def test_a_second_fit_with_the_same_scheduler_is_not_refused(tmp_path: Path) -> None:
    fit = quiet(tmp_path, max_epochs=2, callbacks=[GradientAccumulationScheduler({1: 2})])
    fit.fit(Regressor(), loader(regression_data(32)))
    fit.fit(Regressor(), loader(regression_data(32)))
    assert fit.global_step == 4 + 2


def test_resume_inside_a_scheduled_epoch_is_bitwise_equal(tmp_path: Path) -> None:
    """A run resumed mid-epoch gets that epoch's factor (set in on_train_start), not the Trainer's default."""

    def run(folder: Path, ckpt: Path | None = None) -> tuple[list[torch.Tensor], Any]:

        torch.manual_seed(0)
        module = Regressor(dropout=0.2)
        every_step = every_step_checkpoints(folder)
        fit = quiet(
            tmp_path,
            max_epochs=3,
            enable_checkpointing=True,
            callbacks=[every_step, GradientAccumulationScheduler({1: 3, 2: 2})],
        )
        fit.fit(module, loader(regression_data(56), shuffle=True), ckpt_path=ckpt)
        return params(module), fit

    final, fit = run(tmp_path / "full")
    assert fit.global_step == 7 + 3 + 4
    for step in (8, 11):  # inside epoch 1 (accumulating 3) and inside epoch 2 (accumulating 2)
        resumed, resumed_fit = run(tmp_path / f"resume{step}", tmp_path / "full" / f"step{step}.ckpt")
        assert resumed_fit.global_step == fit.global_step
        assert_bitwise_equal(resumed, final)


# ---- the migration guide's list of what a port cannot find ------------------------------------------------
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "migration" / "from-lightning.md"


@pytest.mark.slow  # importing Lightning costs ~6 s of CPU
def test_the_guide_lists_exactly_what_a_port_cannot_find() -> None:
    """Every public Lightning name whose ported import fails is in the guide's generated table, and every name
    there still fails: after adding a name, rerun ``benchmarks/lightning_tests.py --guide``."""
    pytest.importorskip("lightning.pytorch")
    from benchmarks.lightning_guide import missing_from_surface, resolves

    section = GUIDE.read_text().split("<!-- generated: cannot-find -->", 1)[1].split("<!-- end generated", 1)[0]
    listed = {re.findall(r"`([\w.]+)`", line)[0] for line in section.splitlines() if line.startswith("| `")}
    assert sorted(missing_from_surface() - listed) == [], "a port cannot find these: add them to the guide's table"
    assert sorted(name for name in listed if resolves(name)) == [], "a port finds these: remove their rows"


def test_move_data_to_device_moves_nested_tensors() -> None:
    from trainer.utilities import move_data_to_device

    batch = {"x": torch.ones(2), "pair": (torch.zeros(1), "label")}
    moved = move_data_to_device(batch, "meta")  # a device every machine has, unlike the tensors' own
    assert moved["pair"][1] == "label" and moved["x"].shape == (2,)
    assert moved["x"].device.type == moved["pair"][0].device.type == "meta" and batch["x"].device.type == "cpu"


def test_isolate_rng_puts_every_generator_back_even_when_the_block_raises() -> None:
    import random

    import numpy as np

    exec(port("from lightning.pytorch.utilities.seed import isolate_rng"), namespace := {})
    isolate_rng = namespace["isolate_rng"]
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    expected = (torch.rand(2), random.random(), np.random.rand())
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    with pytest.raises(ZeroDivisionError), isolate_rng():
        torch.rand(5), random.random(), np.random.rand(3)
        1 / 0  # noqa: B018
    after = (torch.rand(2), random.random(), np.random.rand())
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]


# ---- utilities a Lightning script imports ----------------------------------------------------------------
def test_tied_parameters_are_found_and_tied_again() -> None:
    from trainer.utilities import find_shared_parameters, set_shared_parameters

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    model[2].weight = model[0].weight
    assert find_shared_parameters(model) == [["0.weight", "2.weight"]]
    model[2].weight = torch.nn.Parameter(model[0].weight.detach().clone())  # a load that broke the tie
    assert find_shared_parameters(model) == []
    set_shared_parameters(model, [["0.weight", "2.weight"]])
    assert model[2].weight is model[0].weight


def test_small_utilities_answer_as_lightnings() -> None:
    import os

    from trainer.utilities import is_picklable, is_shared_filesystem, suggested_max_num_workers

    assert is_picklable({"lr": 0.1}) and not is_picklable(lambda: 0)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert suggested_max_num_workers(1) == max(1, cpus - 1) and suggested_max_num_workers(10_000) == 1
    with pytest.raises(ValueError, match="local_world_size=0"):
        suggested_max_num_workers(0)
    assert is_shared_filesystem(Trainer(accelerator="cpu").strategy)  # one rank: always


def test_possible_user_warnings_can_be_silenced() -> None:
    from trainer.utilities import disable_possible_user_warnings
    from trainer.utilities.warnings import PossibleUserWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disable_possible_user_warnings()
        warnings.warn("advice", PossibleUserWarning, stacklevel=1)
        warnings.warn("other", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["other"]


def test_instantiate_module_rebuilds_a_cli_saved_module() -> None:
    pytest.importorskip("jsonargparse")
    from trainer.cli import instantiate_module

    built = instantiate_module(Regressor, {"_class_path": "tests.models.Regressor", "lr": 0.5})
    assert type(built) is Regressor and built.hparams.lr == 0.5
    assert instantiate_module(Regressor, {"features": 3}).hparams.features == 3


# ---- benchmarks/lightning_tests.py: how a ported test's failure is classed --------------------------------
def test_the_harness_classes_each_kind_of_failure(tmp_path: Path) -> None:
    from benchmarks.lightning_tests_classes import classify

    test_file = tmp_path / "test_x.py"
    test_file.write_text(
        "def test_mocked(monkeypatch):\n    mock_cuda_count(monkeypatch, 2)\n    Trainer(accelerator='cuda')\n\n"
        "def test_value():\n    assert Trainer().max_epochs == 3\n"
    )
    missing = "ImportError: cannot import name 'Thing' from 'trainer.callbacks'"
    assert classify("x.test_x::test_value", missing, test_file) == ("import", "trainer.callbacks.Thing")
    no_cuda = "E   MisconfigurationException: accelerator='cuda' was asked for, but torch sees no CUDA device"
    assert classify("x.test_x::test_mocked", no_cuda, test_file)[0] == "internals"
    assert classify("x.test_x::test_value", "E   assert 1000 == 3", test_file) == ("public", "assert 1000 == 3")
    saved = "checkpointing.test_model_checkpoint::test_model_checkpoint_every_n_epochs[0]"
    assert classify(saved, "E   assert {'last.ckpt'} == set()", test_file)[0] == "difference"


def test_the_harness_classes_private_patches_and_classes_as_internals(tmp_path: Path) -> None:
    """A test that switches Lightning's code path from inside (a private attribute patched, a private class of
    Lightning's built) is internals; a private helper class the test file defines itself is not."""
    from benchmarks.lightning_tests_classes import classify

    test_file = tmp_path / "test_x.py"
    test_file.write_text(
        "class _OwnIter(object):\n    pass\n\n"
        "def test_flag(monkeypatch):\n    monkeypatch.setattr(imports, '_RICH_AVAILABLE', False)\n    Bar()\n\n"
        "def test_connector():\n    connector = _AcceleratorConnector(precision='16-mixed')\n    assert False\n\n"
        "def test_own():\n    it = _OwnIter()\n    assert it is None\n"
    )
    failed = "E   Failed: DID NOT RAISE ModuleNotFoundError"
    assert classify("x.test_x::test_flag", failed, test_file) == (
        "internals",
        "patches a private attribute of Lightning's (`_RICH_AVAILABLE`)",
    )
    assert classify("x.test_x::test_connector", "E   assert False", test_file) == (
        "internals",
        "uses Lightning's private class `_AcceleratorConnector`",
    )
    assert classify("x.test_x::test_own", "E   assert None is None", test_file)[0] == "public"
    mocked = "E   AttributeError: <x.EarlyStopping object at 0x7f45> does not have the attribute '_evaluate'"
    assert classify("x.test_x::test_own", mocked, test_file) == ("internals", "EarlyStopping._evaluate")
    type_attr = "E   AttributeError: type object 'ModelCheckpoint' has no attribute '_link_checkpoint'"
    assert classify("x.test_x::test_own", type_attr, test_file) == ("internals", "ModelCheckpoint._link_checkpoint")


def test_the_harness_classes_a_fixtures_faked_package_as_internals(tmp_path: Path) -> None:
    """conftest's mlflow_mock holds only the mlflow modules Lightning imports: an import of another one is not a
    name a port misses."""
    from benchmarks.lightning_tests_classes import classify

    test_file = tmp_path / "test_x.py"
    test_file.write_text("def test_exists(mlflow_mock, tmp_path):\n    MLFlowLogger('x').experiment\n")
    faked = "E   ModuleNotFoundError: No module named 'mlflow.utils'; 'mlflow' is not a package"
    assert classify("x.test_x::test_exists", faked, test_file)[0] == "internals"
    real = "E   ModuleNotFoundError: No module named 'trainer.loggers.neptune'"
    assert classify("x.test_x::test_exists", real, test_file) == ("import", "trainer.loggers.neptune")


def test_the_harness_finds_a_test_whose_parameter_is_a_renamed_class() -> None:
    """``[LightningModule]`` in a Lightning id is ``[Module]`` in the ported one: the same test, not a missing one."""
    from benchmarks.lightning_tests import ported_id

    assert ported_id("x.test_hparams::test_ignore[LightningDataModule]") == "x.test_hparams::test_ignore[DataModule]"
    assert ported_id("x.test_a::test_b[LightningModule-1]") == "x.test_a::test_b[Module-1]"
    assert ported_id("x.test_a::test_LightningModule") == "x.test_a::test_LightningModule"  # the name stays


def test_the_harness_classes_hand_set_private_state_and_lightnings_loops_as_internals(tmp_path: Path) -> None:
    """A private attribute set on Lightning's objects, the strategy's ranks faked by assignment, and an attribute of
    Lightning's loop classes (private in Lightning: _FitLoop) are internals; the test's own ``self._x`` is not."""
    from benchmarks.lightning_tests_classes import classify

    test_file = tmp_path / "test_x.py"
    test_file.write_text(
        "def test_swap():\n    trainer._accelerator_connector.strategy = strategy\n    assert False\n\n"
        "def test_ranks():\n    trainer.strategy.world_size = 2\n    assert False\n\n"
        "def test_own():\n    class M:\n        def __init__(self):\n            self._seen = 0\n    assert False\n"
    )
    failed = "E   assert False"
    assert (
        classify("x.test_x::test_swap", failed, test_file)[1]
        == "sets a private attribute of Lightning's (`_accelerator_connector`)"
    )
    assert classify("x.test_x::test_ranks", failed, test_file)[0] == "internals"
    assert classify("x.test_x::test_own", failed, test_file)[0] == "public"
    loop = "E   AttributeError: 'FitLoop' object has no attribute 'max_steps'"
    assert classify("x.test_x::test_own", loop, test_file) == ("internals", "FitLoop.max_steps")
