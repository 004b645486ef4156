"""``strategy="ddp_spawn"`` / ``"ddp_fork"`` / ``"ddp_notebook"``: the ranks start from this process.

Each slow test runs ``spawn_worker.py`` as a real job (2 CPU ranks, gloo) with a deadline.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import assert_no_leftovers, run_python
from trainer import Trainer
from trainer.exceptions import MisconfigurationException
from trainer.strategies import build_strategy
from trainer.strategies.ddp import DDPStrategy
from trainer.strategies.single import SingleDeviceStrategy
from trainer.strategies.spawn import MultiprocessingLauncher

WORKER = Path(__file__).with_name("spawn_worker.py")


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    return Path(shutil.copy(WORKER, tmp_path / "spawn_worker.py"))


@pytest.mark.parametrize(
    ("name", "method", "unused"),
    [
        ("ddp_spawn", "spawn", False),
        ("ddp_fork", "fork", False),
        ("ddp_notebook", "fork", False),
        ("ddp_find_unused_parameters_true", "popen", True),
        ("ddp_find_unused_parameters_false", "popen", False),
        ("ddp_spawn_find_unused_parameters_true", "spawn", True),
        ("DDP_Fork", "fork", False),
    ],
)
def test_a_strategy_name_builds_lightnings_ddp(name: str, method: str, unused: bool) -> None:
    strategy = build_strategy(name)
    assert isinstance(strategy, DDPStrategy)
    assert (strategy.start_method, strategy.find_unused_parameters) == (method, unused)
    assert isinstance(strategy.launcher, MultiprocessingLauncher) == (method != "popen")


def test_single_device_is_the_single_strategy(tmp_path: Path) -> None:
    trainer = Trainer(strategy="single_device", accelerator="cpu", logger=False, default_root_dir=tmp_path)
    assert isinstance(trainer.strategy, SingleDeviceStrategy)


@pytest.mark.parametrize("name", ["ddp_spawnn", "fsdp_find_unused_parameters_true", "deepspeed_stage_2", "xla"])
def test_an_unknown_or_unsupported_strategy_name_is_refused(name: str) -> None:
    with pytest.raises(MisconfigurationException, match=f"strategy='{name}'"):
        build_strategy(name)


def test_spawn_on_several_nodes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match="num_nodes=2"):
        Trainer(strategy="ddp_spawn", accelerator="cpu", devices=1, num_nodes=2, default_root_dir=tmp_path).fit(
            None  # type: ignore[arg-type]
        )


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_ranks_fit_and_hand_the_weights_back(worker: Path, tmp_path: Path, strategy: str) -> None:
    out = tmp_path / "out.json"
    finished = run_python([str(worker), "fit", strategy, str(out)], timeout=180)
    assert finished.returncode == 0, finished.output
    result = json.loads(out.read_text())
    assert result["ranks"] != result["initial"]  # the weights here are the fitted ones, not the ones sent out
    assert result["max_diff"] < 1e-6  # 2 ranks x 4 samples == 1 device x 8 samples (same math)
    assert_no_leftovers(str(worker))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_a_failing_rank_ends_the_job_with_its_traceback(worker: Path, tmp_path: Path, strategy: str) -> None:
    finished = run_python([str(worker), "fail", strategy, str(tmp_path / "x")], timeout=120)
    seconds = finished.ended_at - finished.marker_time("RAISED_AT")
    assert finished.returncode == 1, finished.output
    assert seconds < 5, finished.output
    assert "[rank1]: ValueError: boom on rank 1" in finished.output  # the rank's traceback
    assert finished.output.rstrip().splitlines()[-1] == "rank 1 failed: ValueError: boom on rank 1"
    assert_no_leftovers(str(worker))


def test_fsdp_cpu_offload_names_fsdp_with_its_parameters_on_the_cpu() -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy

    assert isinstance(build_strategy("fsdp_cpu_offload").offload_policy, CPUOffloadPolicy)  # type: ignore[attr-defined]
    assert build_strategy("fsdp").offload_policy is None  # type: ignore[attr-defined]
