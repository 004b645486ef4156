"""LightningCLI's semantics the CLI keeps (Lightning's tests/tests_pytorch/test_cli.py holds the originals): the
subcommands are Trainer methods called with keywords, a CLI-built module saves its config as hyper-parameters and
loads back from a checkpoint through them, fast_dev_run saves no config, Lightning's class paths anywhere."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("jsonargparse", reason="the CLI needs jsonargparse: pip install 'jsonargparse[signatures]'")
from jsonargparse import lazy_instance

from tests.cli_fixtures.tiny import Data, Model
from trainer import Trainer
from trainer.checkpoint import load_checkpoint, save_checkpoint
from trainer.cli import CLI, SaveConfigCallback
from trainer.loggers import CSVLogger

QUIET = [
    "--trainer.logger",
    "false",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test in its own folder, and a command line of its own (no pytest arguments to warn about)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])


LEAKY = lazy_instance(torch.nn.LeakyReLU, negative_slope=0.05)


class Injected(Model):
    """A module whose arguments are objects the CLI builds from class paths."""

    def __init__(
        self,
        hidden: int = 8,
        activation: torch.nn.Module = LEAKY,
    ) -> None:
        super().__init__(hidden=hidden)
        self.save_hyperparameters()
        self.activation = activation


def test_a_subcommand_gets_its_own_flags_the_model_and_the_datamodule_as_keywords() -> None:
    got: dict[str, Any] = {}

    class Recording(CLI):
        def validate(self, **kwargs: Any) -> None:
            got.update(kwargs)

    cli = Recording(Model, Data, args=["validate", "--verbose", "false", *QUIET])
    assert got == {
        "model": cli.model,
        "datamodule": cli.datamodule,
        "ckpt_path": None,
        "verbose": False,
        "weights_only": None,
    }


def test_a_subclass_adds_a_subcommand_from_a_trainer_method(capsys: pytest.CaptureFixture[str]) -> None:
    class Custom(Trainer):
        def foo(self, model: Any, bar: int = 1) -> None:
            """Sample extra function.

            Args:
                bar: how many.
            """
            self.bar = bar

    class WithFoo(CLI):
        @staticmethod
        def subcommands() -> dict[str, set[str]]:
            return {**CLI.subcommands(), "foo": {"model"}}

    cli = WithFoo(Model, trainer_class=Custom, args=["foo", "--bar", "3", *QUIET])  # no datamodule: none passed
    assert cli.trainer.bar == 3  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        WithFoo(Model, trainer_class=Custom, args=["--help"])
    assert "Sample extra function." in capsys.readouterr().out


def test_fast_dev_run_saves_no_config_and_a_second_run_in_the_folder_is_refused() -> None:
    CLI(Model, Data, args=["fit", "--trainer.fast_dev_run", "1", *QUIET])
    assert not Path("config.yaml").exists()
    CLI(Model, Data, args=["fit", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1", *QUIET])
    assert Path("config.yaml").is_file()
    with pytest.raises(RuntimeError, match="Aborting to avoid overwriting"):
        CLI(Model, Data, args=["fit", "--trainer.max_epochs", "1", *QUIET])


def test_a_cli_module_saves_its_config_and_loads_back_through_it() -> None:
    args = ["fit", "--model.hidden", "5", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", *QUIET]
    cli = CLI(Injected, Data, args=[*args, "--trainer.default_root_dir", "runs"])
    checkpoint = next(Path("runs").rglob("*.ckpt"))
    saved = load_checkpoint(checkpoint)["hyper_parameters"]
    assert saved["_instantiator"] == "lightning.pytorch.cli.instantiate_module"  # loads under Lightning too
    assert saved["hidden"] == 5 and saved["activation"]["class_path"] == "torch.nn.LeakyReLU"
    loaded = Injected.load_from_checkpoint(checkpoint)
    assert isinstance(loaded.activation, torch.nn.LeakyReLU) and loaded.activation.negative_slope == 0.05
    assert loaded.net[0].out_features == 5 and cli.model.hparams["hidden"] == 5

    # test --ckpt_path builds the model the checkpoint was trained as, without --model.hidden
    tested = CLI(Injected, Data, args=["test", "--ckpt_path", str(checkpoint), *QUIET])
    assert tested.model.net[0].out_features == 5
    # ... and what the command line says still wins over the checkpoint's values (Lightning's would replace it)
    args = ["test", "--ckpt_path", str(checkpoint), "--model.activation", "torch.nn.Tanh", *QUIET]
    flagged = CLI(Injected, Data, args=args)
    assert isinstance(flagged.model.activation, torch.nn.Tanh) and flagged.model.net[0].out_features == 5


def test_a_checkpoint_naming_another_instantiator_is_refused(tmp_path: Path) -> None:
    state = {"state_dict": Injected().state_dict(), "hyper_parameters": {"hidden": 8, "_instantiator": "os.system"}}
    save_checkpoint(state, tmp_path / "hostile.ckpt")
    with pytest.raises(ValueError, match=r"'os\.system' from the checkpoint is not one of the trusted"):
        Injected.load_from_checkpoint(tmp_path / "hostile.ckpt")


def test_lightning_class_paths_in_trainer_defaults_and_fabric_paths() -> None:
    from trainer.lightning_paths import port_class_paths

    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "logs"}}
    saver = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"monitor": "val_loss"}}
    defaults = {"logger": logger, "callbacks": saver}
    cli = CLI(Model, Data, trainer_defaults=defaults, args=["--trainer.enable_progress_bar", "false"], run=False)
    assert isinstance(cli.trainer.logger, CSVLogger)
    assert any(getattr(cb, "monitor", None) == "val_loss" for cb in cli.trainer.callbacks)
    fabric = "lightning.fabric.plugins.environments.SLURMEnvironment"
    assert port_class_paths(fabric) == "trainer.plugins.environments.SLURMEnvironment"


def test_a_trainer_without_callbacks_gets_a_warning_not_an_error() -> None:
    def build(max_epochs: int = 1) -> Trainer:
        return Trainer(max_epochs=max_epochs, logger=False, enable_progress_bar=False)

    with pytest.warns(UserWarning, match="does not expose the `callbacks` argument"):
        cli = CLI(Model, Data, trainer_class=build, args=["--trainer.max_epochs", "2"], run=False)
    assert cli.trainer.max_epochs == 2
    assert not any(isinstance(cb, SaveConfigCallback) for cb in cli.trainer.callbacks)


def test_hparams_yaml_holds_the_modules_hyperparameters_not_the_config() -> None:
    args = [
        "fit",
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "1",
        "--trainer.limit_val_batches",
        "1",
    ]
    CLI(Injected, Data, args=[*args, "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", "r"])
    logged = yaml.safe_load(next(Path("r").rglob("hparams.yaml")).read_text())
    assert set(logged) == {"hidden", "activation", "_instantiator"}  # Lightning's: no "config", no "_class_path"


def test_a_failed_spawned_rank_is_torchs_process_raised_exception() -> None:
    from torch.multiprocessing import ProcessRaisedException

    from trainer.strategies.spawn import RankFailedError

    error = RankFailedError("rank 1 failed: boom", 1, 4242)
    assert isinstance(error, ProcessRaisedException) and error.error_index == 1 and "boom" in str(error)


def test_without_load_from_checkpoint_support_a_module_saves_its_own_init_args() -> None:
    args = ["--model.hidden", "3", "--trainer.enable_progress_bar", "false"]
    cli = CLI(Injected, Data, args=args, run=False, load_from_checkpoint_support=False)
    assert "_instantiator" not in cli.model.hparams and isinstance(cli.model.hparams["activation"], torch.nn.LeakyReLU)
    assert "_instantiator" in CLI(Injected, Data, args=args, run=False).model.hparams
