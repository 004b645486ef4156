"""The CLI as a user drives it: ``python train.py fit ...`` (subprocess) and ``CLI(..., run=False)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.cli_fixtures.tiny import Data, Model
from trainer.checkpoint import load_checkpoint, load_weights
from trainer.cli import CLI, SaveConfigCallback

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "cli_fixtures" / "train.py"
QUICK = "--trainer.max_epochs 1 --trainer.limit_train_batches 2 --trainer.accelerator cpu"
QUICK += " --trainer.enable_progress_bar false"
_LAUNCHER_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"}
_LAUNCHER_VARS |= {"MASTER_ADDR", "MASTER_PORT"}


def argv(*parts: str | Path) -> list[str]:
    """Strings are split on spaces like a shell would; paths stay whole."""
    return [arg for part in parts for arg in (part.split() if isinstance(part, str) else [str(part)])]


def _env() -> dict[str, str]:
    """No inherited launcher variables; the repo importable (``tests.cli_fixtures``); one thread per rank."""
    prefixes = ("SLURM_", "TORCHELASTIC_", "STEADYTRAIN_SELF")
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith(prefixes)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_cli(*parts: str | Path, module: bool = False) -> subprocess.CompletedProcess[str]:
    """``python tests/cli_fixtures/train.py ARGS`` (or ``python -m trainer ARGS``) from the repo root."""
    command = [sys.executable, "-m", "trainer"] if module else [sys.executable, str(SCRIPT)]
    return subprocess.run(
        [*command, *argv(*parts)],
        cwd=REPO,
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


# ---- one real fit, shared by the tests that read what it left behind -----------------------
@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """fit with a config file, then flags after it: the optimizer and scheduler chosen by flag."""
    tmp = tmp_path_factory.mktemp("fit")
    config = write_yaml(
        tmp / "run.yaml",
        {"trainer": {"max_epochs": 5, "default_root_dir": str(tmp / "runs")}, "model": {"hidden": 3}},
    )
    optimizer = "--model.optimizer torch.optim.SGD --model.optimizer.lr 0.1"
    scheduler = "--model.scheduler torch.optim.lr_scheduler.StepLR --model.scheduler.step_size 1"
    ok(run_cli("fit --config", config, QUICK, optimizer, scheduler, "--model.report", tmp / "report"))
    yield tmp


def test_fit_takes_the_config_file_and_the_flags_after_it(fitted: Path) -> None:
    saved = yaml.safe_load((run_folder(fitted / "runs") / "config.yaml").read_text())
    assert saved["model"]["hidden"] == 3  # from the file
    assert saved["trainer"]["max_epochs"] == 1  # the flag after --config wins
    assert saved["trainer"]["default_root_dir"] == str(fitted / "runs")


def test_optimizer_and_scheduler_chosen_on_the_command_line_are_used(fitted: Path) -> None:
    report = json.loads((fitted / "report.rank0.json").read_text())
    assert report == {"optimizer": "SGD", "lr": 0.1, "scheduler": ["StepLR"], "world_size": 1}
    checkpoint = load_checkpoint(run_folder(fitted / "runs") / "checkpoints" / "last.ckpt")
    assert checkpoint["optimizers"][0]["param_groups"][0]["lr"] == pytest.approx(0.01)  # 0.1, one StepLR step


def test_config_yaml_checkpoint_and_logger_hold_the_same_config(fitted: Path) -> None:
    folder = run_folder(fitted / "runs")
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert load_checkpoint(folder / "checkpoints" / "last.ckpt")["config"] == saved
    assert yaml.safe_load((folder / "hparams.yaml").read_text())["config"] == saved
    assert saved["model"]["optimizer"]["class_path"] == "torch.optim.SGD"


@pytest.mark.parametrize("stage", ["validate", "test"])
def test_evaluate_a_checkpoint_with_the_saved_config(fitted: Path, stage: str) -> None:
    folder = run_folder(fitted / "runs")
    config, checkpoint = folder / "config.yaml", folder / "checkpoints" / "last.ckpt"
    out = ok(run_cli(stage, "--config", config, "--ckpt_path", checkpoint, "--trainer.logger false"))
    name = "val_loss" if stage == "validate" else "test_loss"
    printed = float(out.split(f"{name}:")[1].split()[0])
    trained = Model(hidden=3)
    load_weights(trained, load_checkpoint(checkpoint))
    torch.manual_seed(yaml.safe_load(config.read_text())["seed_everything"])
    fresh = Model(hidden=3)  # what the command evaluates if it does not load the checkpoint
    assert printed == pytest.approx(mse(trained), rel=1e-4)  # the checkpoint's weights, on every sample
    assert printed != pytest.approx(mse(fresh), rel=1e-3)  # ... which --ckpt_path alone brings in


def mse(model: Model) -> float:
    """The model's loss on the tiny data set (every split is the same samples)."""
    data = Data()
    data.setup("validate")
    assert data.dataset is not None
    x, y = data.dataset.tensors
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model.net(x), y))


# ---- configs, print_config, run=False (in-process: no training) ----------------------------
def build(*parts: str | Path, stage: str = "fit") -> CLI:
    return CLI(Model, Data, args=argv(stage, *parts), run=False)


def test_configs_merge_in_order_and_print_config_round_trips(tmp_path: Path) -> None:
    first = write_yaml(
        tmp_path / "a.yaml",
        {
            "model": {"hidden": 3, "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.2}}},
            "trainer": {"max_epochs": 4},
        },
    )
    second = write_yaml(tmp_path / "b.yaml", {"model": {"hidden": 5}})
    flags_after = "--data.batch_size 4 --print_config"
    printed = ok(run_cli("fit --trainer.max_epochs 9 --config", first, "--config", second, flags_after))
    config = yaml.safe_load(printed)
    assert config["trainer"]["max_epochs"] == 4  # the flag came before the file
    assert config["model"]["hidden"] == 5  # the later file wins
    assert config["model"]["optimizer"]["init_args"]["lr"] == 0.2  # ... and keeps what it does not set
    assert config["data"]["batch_size"] == 4
    again = write_yaml(tmp_path / "printed.yaml", config)
    assert build("--config", again).config == config
    assert yaml.safe_load(ok(run_cli("fit --config", again, "--print_config"))) == config


def test_run_false_exposes_what_it_built(tmp_path: Path) -> None:
    cli = build("--model.hidden 6 --trainer.logger false --trainer.default_root_dir", tmp_path)
    assert isinstance(cli.model, Model) and isinstance(cli.datamodule, Data)
    assert cli.trainer.config is cli.config and cli.config["model"]["hidden"] == 6
    assert any(isinstance(cb, SaveConfigCallback) for cb in cli.trainer.callbacks)
    assert isinstance(cli.model.optimizer(cli.model.parameters()), torch.optim.AdamW)  # the lambda default
    assert not any(isinstance(cb, SaveConfigCallback) for cb in build(stage="test").trainer.callbacks)


def test_seed_everything_runs_before_the_model_is_built() -> None:
    def weights(seed: str) -> torch.Tensor:
        return next(build(f"--seed_everything {seed}").model.parameters()).detach().clone()

    assert torch.equal(weights("1"), weights("1"))
    assert not torch.equal(weights("1"), weights("2"))


def test_help_comes_from_docstrings_and_types(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build("--help")
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Width of the hidden layer. (type: int, default: 8)" in out
    assert (
        "--trainer.max_epochs MAX_EPOCHS stop after this many epochs (default 1000 unless max_steps is set). "
        "(type: int | null, default: null)"
    ) in out


# ---- errors: exit code 2 and a message that names the problem ------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--trainer.max_epohcs 1", "unrecognized arguments: --trainer.max_epohcs"),
        ("--trainer.max_epoch 1", "unrecognized arguments: --trainer.max_epoch"),  # no abbreviations
        ("--trainer.max_epochs abc", 'Parser key "trainer.max_epochs"'),
        ("--model.optimizer torch.optim.Nope", 'Parser key "model.optimizer"'),
        ("--ckpt_path missing.ckpt", "--ckpt_path missing.ckpt: no such file"),
        ("--trainer.gradient_clip_algorithm abs", "gradient_clip_algorithm='abs': choose one of norm, value"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(args: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_trainer_validation_error_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    result = run_cli("fit --trainer.precision 17 --trainer.default_root_dir", tmp_path)
    assert result.returncode == 2
    assert "error: invalid --trainer.* value: ValueError: precision='17' is not supported" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # nothing written before the error


# ---- python -m trainer: classes by import path ---------------------------------------------
def test_python_m_trainer_subclass_mode(tmp_path: Path) -> None:
    model = "--model tests.cli_fixtures.tiny.Model --model.init_args.hidden 6"
    model += " --model.init_args.optimizer torch.optim.Adam --model.init_args.report"
    data = "--data tests.cli_fixtures.tiny.Data --data.batch_size 4"
    runs = ("--trainer.default_root_dir", tmp_path / "runs")
    ok(run_cli("fit", model, tmp_path / "rep", data, QUICK, *runs, module=True))
    assert json.loads((tmp_path / "rep.rank0.json").read_text())["optimizer"] == "Adam"
    saved = yaml.safe_load((run_folder(tmp_path / "runs") / "config.yaml").read_text())
    assert saved["model"]["class_path"] == "tests.cli_fixtures.tiny.Model"
    assert saved["model"]["init_args"]["hidden"] == 6
    assert saved["data"]["init_args"]["batch_size"] == 4


# ---- one flag swaps the strategy ------------------------------------------------------------
@pytest.mark.slow
def test_same_script_runs_ddp_with_two_cpu_ranks(tmp_path: Path) -> None:
    ddp = "--trainer.strategy ddp --trainer.devices 2"
    paths = ("--trainer.default_root_dir", tmp_path / "runs", "--model.report", tmp_path / "rep")
    ok(run_cli("fit", QUICK, ddp, *paths))
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rep.rank{rank}.json").read_text())["world_size"] == 2
    folder = run_folder(tmp_path / "runs")  # one run folder, written by rank zero
    assert load_checkpoint(folder / "checkpoints" / "last.ckpt")["config"]["trainer"]["strategy"] == "ddp"
