"""The Module's utilities from Lightning: example_input_array, print, ranks, loggers, all_gather, freeze."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks.progress import ProgressBar
from trainer.loggers.base import Logger

ROOT = Path(__file__).parent.parent


class Memory(Logger):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass


class Seeing(Regressor):
    """Records what the module sees of its run during fit."""

    def on_fit_start(self) -> None:
        self.seen = (self.local_rank, self.logger, self.loggers)


# ---- example_input_array -----------------------------------------------------------------------------------
def test_example_input_array_defaults_to_none_and_is_settable() -> None:
    module = Regressor()
    assert module.example_input_array is None
    module.example_input_array = torch.zeros(3, 8)
    assert module.example_input_array.shape == (3, 8)
    assert "example_input_array" not in dict(module.named_buffers())  # not saved with the weights


def test_model_summary_shows_in_and_out_sizes_from_the_example(tmp_path: Path, capsys: Any) -> None:
    class WithForward(Regressor):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    module = WithForward()
    module.example_input_array = torch.zeros(3, 8)
    quiet(tmp_path, max_steps=1, enable_model_summary=True).fit(module, loader(regression_data(8)))
    table = capsys.readouterr().out
    assert "In sizes" in table and "Out sizes" in table
    assert "[3, 8]" in table and "[3, 1]" in table


# ---- facts about the run -----------------------------------------------------------------------------------
def test_local_rank_logger_and_loggers_without_and_with_a_trainer(tmp_path: Path) -> None:
    module = Seeing()
    assert (module.local_rank, module.logger, module.loggers) == (0, None, [])
    first, second = Memory(), Memory()
    quiet(tmp_path, max_steps=1, logger=[first, second]).fit(module, loader(regression_data(8)))
    assert module.seen == (0, first, [first, second])


def test_print_on_global_rank_zero_only(capsys: Any) -> None:
    module = Regressor()
    module.print("no trainer", 1)
    object.__setattr__(module, "_trainer", SimpleNamespace(global_rank=1, progress_bar_callback=None))
    module.print("rank one")
    assert capsys.readouterr().out == "no trainer 1\n"


def test_print_goes_above_a_drawing_progress_bar() -> None:
    written: list[tuple[Any, ...]] = []

    class Recording(ProgressBar):
        def print(self, *args: Any, **kwargs: Any) -> None:
            written.append((args, kwargs))

    module = Regressor()
    object.__setattr__(module, "_trainer", SimpleNamespace(global_rank=0, progress_bar_callback=Recording()))
    module.print("a", 2, sep="-", flush=True)
    assert written == [(("a", 2), {"sep": "-", "flush": True})]  # the bar writes it, above itself


# ---- all_gather --------------------------------------------------------------------------------------------
def test_all_gather_on_one_process_returns_tensors_unchanged(tmp_path: Path) -> None:
    gathered: list[Any] = []

    class Gathering(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            gathered.append(self.all_gather(batch[0]))
            gathered.append(self.all_gather({"n": 2, "t": (batch[1],)}))
            with pytest.raises(ValueError, match=r"all_gather\(group=\.\.\.\): .* over all ranks only"):
                self.all_gather(batch[0], group=object())
            return super().training_step(batch, batch_idx)

    quiet(tmp_path, max_steps=1).fit(Gathering(), loader(regression_data(8), batch_size=4))
    assert gathered[0].shape == (4, 8)  # no leading dimension of 1, as in Lightning
    assert torch.equal(gathered[1]["n"], torch.tensor(2)) and gathered[1]["t"][0].shape == (4, 1)


@pytest.mark.slow
def test_all_gather_and_print_across_two_ranks(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scripts" / "module_api_job.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("printed by rank") == 1 and "printed by rank 0" in proc.stdout
    for rank in (0, 1):
        seen = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert seen["plain"].tolist() == [[0, 10], [1, 11]]
        assert seen["n"].tolist() == [1.5, 2.5] and seen["t"].tolist() == [0.0, 1.0]
        assert seen["requires_grad"] and seen["local_rank"] == rank
        assert seen["grad"].tolist() == [2.0 * (rank + 1)] * 2  # each rank's slot summed over both ranks


# ---- freeze / unfreeze -------------------------------------------------------------------------------------
def test_freeze_and_unfreeze() -> None:
    module = Regressor(dropout=0.1)
    assert module.freeze() is module
    assert not any(p.requires_grad for p in module.parameters()) and not module.training
    assert not module.net[2].training
    module.unfreeze()
    assert all(p.requires_grad for p in module.parameters()) and module.net[2].training
