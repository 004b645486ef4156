"""Running the CLI as a user does: a ``python train.py ...`` subprocess, clean of launcher and seed state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "cli_fixtures" / "train.py"
QUICK = "--trainer.max_epochs 1 --trainer.limit_train_batches 2 --trainer.accelerator cpu"
QUICK += " --trainer.enable_progress_bar false"
SEED_VARS = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")
_LAUNCHER_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"}
_LAUNCHER_VARS |= {"MASTER_ADDR", "MASTER_PORT"}


def argv(*parts: str | Path) -> list[str]:
    """Strings are split on spaces like a shell would; paths stay whole."""
    return [arg for part in parts for arg in (part.split() if isinstance(part, str) else [str(part)])]


def _env() -> dict[str, str]:
    """No inherited launcher variables; the repo importable (``tests.cli_fixtures``); one thread per rank."""
    prefixes = ("SLURM_", "TORCHELASTIC_", "STEADYTRAIN_SELF", *SEED_VARS)
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith(prefixes)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_cli(
    *parts: str | Path, module: bool = False, script: Path = SCRIPT, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """``python tests/cli_fixtures/train.py ARGS`` (or ``python -m trainer ARGS``) from the repo root."""
    command = [sys.executable, "-m", "trainer"] if module else [sys.executable, str(script)]
    return subprocess.run(
        [*command, *argv(*parts)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def run_folder(root: Path) -> Path:
    """The first run's folder (the CSV logger's ``<name>/version_0``)."""
    (folder,) = list(root.glob("*/version_0"))
    return folder
