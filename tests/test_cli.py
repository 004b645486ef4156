"""The CLI as a user drives it: ``python train.py fit ...`` (subprocess) and ``CLI(..., run=False)``."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("jsonargparse", reason="the CLI needs jsonargparse: pip install 'jsonargparse[signatures]'")
from tests.cli_fixtures.running import QUICK, REPO, SEED_VARS, argv, ok, run_cli, run_folder, write_yaml
from tests.cli_fixtures.subclasses import HookedCLI, LinkedCLI, LoggedConfig, Marker
from tests.cli_fixtures.tiny import Data, Model
from tests.lightning_port import port
from trainer import EarlyStopping, ModelCheckpoint, Trainer
from trainer.checkpoint import load_checkpoint, load_weights
from trainer.cli import CLI, ArgumentParser, SaveConfigCallback
from trainer.loggers import CSVLogger


@pytest.fixture(autouse=True)
def _seed_env() -> Iterator[None]:
    """Every test starts with no exported seed, and the seed a CLI exports does not leak into the next test."""
    saved = {name: os.environ.pop(name) for name in SEED_VARS if name in os.environ}
    yield
    for name in SEED_VARS:
        os.environ.pop(name, None)
    os.environ.update(saved)


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
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.01)  # 0.1, one StepLR step


def test_config_yaml_and_checkpoint_hold_the_same_config(fitted: Path) -> None:
    folder = run_folder(fitted / "runs")
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert load_checkpoint(folder / "checkpoints" / "last.ckpt")["config"] == saved
    logged = folder / "hparams.yaml"  # Lightning's: the loggers get the module's hyper-parameters, not the config
    assert "config" not in ((yaml.safe_load(logged.read_text()) if logged.exists() else None) or {})
    assert saved["model"]["optimizer"]["class_path"] == "torch.optim.SGD"


@pytest.mark.parametrize("stage", ["validate", "test"])
def test_evaluate_a_checkpoint_with_the_saved_config(fitted: Path, stage: str) -> None:
    folder = run_folder(fitted / "runs")
    config, checkpoint = folder / "config.yaml", folder / "checkpoints" / "last.ckpt"
    out = ok(run_cli(stage, "--config", config, "--ckpt_path", checkpoint, "--trainer.logger false"))
    name = "val_loss" if stage == "validate" else "test_loss"
    printed = float(next(line.split()[1] for line in out.splitlines() if line.startswith(name)))  # the results table
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
def build(*parts: str | Path, **kwargs: Any) -> CLI:
    """Lightning's ``run=False``: one parser, no subcommand, nothing runs."""
    return CLI(Model, Data, args=argv(*parts), run=False, **kwargs)


def fit(tmp_path: Path, *parts: str | Path, cli_class: type[CLI] = CLI, **kwargs: Any) -> CLI:
    """A real, tiny fit in this process; logger off, so the run folder is ``tmp_path`` itself."""
    folder = ("--trainer.logger false --trainer.default_root_dir", tmp_path)
    return cli_class(Model, Data, args=argv("fit", QUICK, *folder, *parts), **kwargs)


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
    built = CLI(Model, Data, args=argv("fit --config", again), run=False).config_dump
    assert built == {**config, "seed_everything": 0}  # true became the seed it used
    assert yaml.safe_load(ok(run_cli("fit --config", again, "--print_config"))) == config


def test_run_false_has_one_parser_builds_everything_and_runs_nothing(tmp_path: Path) -> None:
    cli = build("--model.hidden 6 --trainer.default_root_dir", tmp_path)
    assert cli.subcommand is None and cli.config.model.hidden == 6  # Lightning's Namespace, no subcommand level
    assert isinstance(cli.model, Model) and isinstance(cli.datamodule, Data)
    assert cli.trainer.config is cli.config_dump and cli.config_dump["model"]["hidden"] == 6
    assert any(isinstance(cb, SaveConfigCallback) for cb in cli.trainer.callbacks)
    assert isinstance(cli.model.optimizer(cli.model.parameters()), torch.optim.AdamW)  # the lambda default
    assert cli.trainer.global_step == 0 and not list(tmp_path.iterdir())  # nothing ran, nothing written
    with pytest.raises(SystemExit) as exit_info:
        build("--ckpt_path last")  # a subcommand's flag: there is none
    assert exit_info.value.code == 2


def test_run_false_with_a_subcommand_name_builds_that_subcommand() -> None:
    """Earlier steadytrain (and tests/test_recipes.py) name the subcommand with run=False; still accepted."""
    cli = CLI(Model, Data, args=["test", "--trainer.logger", "false"], run=False)
    assert cli.subcommand == "test" and cli.config.test.trainer.logger is False
    saver = [cb for cb in cli.trainer.callbacks if isinstance(cb, SaveConfigCallback)]  # Lightning adds it always
    assert len(saver) == 1 and not saver[0].already_saved  # it writes when a fit starts
    assert not cli.trainer.callback_metrics  # not run


def test_print_config_without_subcommand_shows_trainer_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build("--print_config", trainer_defaults={"max_epochs": 7})
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["max_epochs"] == 7 and printed["seed_everything"] is True
    assert "ckpt_path" not in printed and "subcommand" not in printed


def test_seed_everything_runs_before_the_model_is_built() -> None:
    def weights(seed: str) -> torch.Tensor:
        return next(build(f"--seed_everything {seed}").model.parameters()).detach().clone()

    assert torch.equal(weights("1"), weights("1"))
    assert not torch.equal(weights("1"), weights("2"))


@pytest.mark.parametrize(
    ("default", "exported", "expected"),
    [(True, None, 0), (True, "7", 7), (42, "7", 42), (False, "7", None), (None, None, None)],
)
def test_seed_everything_default(default: bool | int | None, exported: str | None, expected: int | None) -> None:
    """True: the exported seed (a DDP parent's, PL_GLOBAL_SEED), else 0 (Lightning 2.x); int: it; False/None: none."""
    if exported is not None:
        os.environ["PL_GLOBAL_SEED"] = exported
    torch.manual_seed(99)
    cli = CLI(Model, Data, seed_everything_default=default, args=[], run=False)
    torch.manual_seed(99 if expected is None else expected)
    assert torch.equal(cli.model.net[0].weight, Model().net[0].weight)
    assert cli.config_dump["seed_everything"] == (default if expected is None else expected)  # the seed used


def test_help_comes_from_docstrings_and_types(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build("--help")
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Width of the hidden layer. (type: int, default: 8)" in out
    assert (
        "--trainer.max_epochs MAX_EPOCHS stop after this many epochs "
        "(None: 1000 with a warning, or no limit with max_steps or max_time; -1: no limit). "
        "(type: int | null, default: null)"
    ) in out


# ---- LightningCLI's constructor arguments ---------------------------------------------------
def test_constructor_takes_lightning_cli_arguments_in_order() -> None:
    names = [p.name for p in inspect.signature(CLI).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert names == [
        *("model_class", "datamodule_class", "save_config_callback", "save_config_kwargs", "trainer_class"),
        *("trainer_defaults", "seed_everything_default", "parser_kwargs", "parser_class", "subclass_mode_model"),
        *("subclass_mode_data", "args", "run", "auto_configure_optimizers", "load_from_checkpoint_support"),
    ]


def test_trainer_defaults_are_overridable_defaults_and_their_callbacks_are_added(tmp_path: Path) -> None:
    defaults = {"max_epochs": 3, "logger": False, "limit_val_batches": 2, "callbacks": [Marker()]}
    config = write_yaml(tmp_path / "c.yaml", {"trainer": {"limit_val_batches": 1}})
    cli = build("--config", config, "--trainer.max_epochs 2", trainer_defaults=defaults)
    assert (cli.trainer.max_epochs, cli.trainer.limits["validation"], cli.trainer.loggers) == (2, 1, [])
    assert sum(isinstance(cb, Marker) for cb in cli.trainer.callbacks) == 1
    with pytest.raises(ValueError, match="trainer_defaults"):
        build(trainer_defaults={"max_epoch": 3})  # a typo in the script fails loudly


def test_trainer_class_subclass_mode_model_and_parser_kwargs(tmp_path: Path) -> None:
    class MyTrainer(Trainer):
        pass

    defaults = write_yaml(tmp_path / "defaults.yaml", {"data": {"size": 16}})
    cli = CLI(
        Model,
        Data,
        trainer_class=MyTrainer,
        subclass_mode_model=True,
        parser_kwargs={"fit": {"default_config_files": [str(defaults)]}},
        args=argv("fit --model tests.cli_fixtures.tiny.Model --model.init_args.hidden 5 --trainer.logger false"),
        run=False,
    )
    assert isinstance(cli.trainer, MyTrainer) and cli.model.net[0].out_features == 5
    assert cli.datamodule is not None and cli.datamodule.size == 16  # the fit parser's default config file


@pytest.mark.parametrize("apply_on", ["parse", "instantiate"])
def test_add_arguments_to_parser_links_data_to_model(apply_on: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli_class = type("Linked", (LinkedCLI,), {"apply_on": apply_on})
    cli = cli_class(Model, Data, args=argv("--data.size 12"), run=False)
    assert cli.model.net[0].out_features == 12 and cli.model.hparams["hidden"] == 12
    with pytest.raises(SystemExit) as exit_info:
        cli_class(Model, Data, args=argv("--model.hidden 3"), run=False)  # a link target is not a flag
    assert exit_info.value.code == 2 and "model.hidden" in capsys.readouterr().err


def test_add_lightning_class_args_adds_the_callback_to_the_trainer() -> None:
    cli = LinkedCLI(Model, Data, args=argv("--early_stopping.patience 5"), run=False)
    (stopper,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, EarlyStopping)]
    assert (stopper.monitor, stopper.patience) == ("val_loss", 5)
    assert cli.config_dump["early_stopping"]["patience"] == 5
    with pytest.raises(TypeError, match="add_lightning_class_args"):
        ArgumentParser().add_lightning_class_args(torch.nn.Linear, "linear")


def test_callbacks_and_logger_from_the_config_by_class_path(tmp_path: Path) -> None:
    checkpoint = {"class_path": "trainer.ModelCheckpoint", "init_args": {"dirpath": str(tmp_path / "ckpt")}}
    stopper = {"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss", "patience": 4}}  # short name
    logger = {"class_path": "trainer.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path), "name": "csv"}}
    config = write_yaml(tmp_path / "c.yaml", {"trainer": {"callbacks": [checkpoint, stopper], "logger": logger}})
    cli = CLI(Model, Data, args=argv("fit --config", config, QUICK))
    kinds = {type(cb): cb for cb in cli.trainer.callbacks}
    assert kinds[EarlyStopping].patience == 4 and kinds[ModelCheckpoint].dirpath == str(tmp_path / "ckpt")
    assert isinstance(cli.trainer.logger, CSVLogger)
    assert (tmp_path / "ckpt" / "last.ckpt").is_file() and (tmp_path / "csv" / "version_0" / "metrics.csv").is_file()


# ---- hooks a LightningCLI subclass overrides (tests/cli_fixtures/subclasses.py) -----------
def test_hooks_run_in_lightnings_order(tmp_path: Path) -> None:
    fitted = fit(tmp_path, cli_class=HookedCLI)
    assert fitted.calls == ["before_instantiate_classes", "after_instantiate_classes:5", "before_fit", "after_fit:1"]
    assert fitted.config_dump["model"]["hidden"] == 5  # the saved config is what was built
    validated = HookedCLI(Model, Data, args=argv("validate --trainer.logger false --trainer.enable_progress_bar false"))
    assert validated.calls[2:] == ["before_validate", "after_validate:['val_loss']"]


def test_optimizer_and_lr_scheduler_groups_replace_configure_optimizers() -> None:
    flags = "--optimizer SGD --optimizer.lr 0.3 --lr_scheduler ReduceLROnPlateau --lr_scheduler.monitor val_loss"
    with pytest.warns(UserWarning, match="configure_optimizers` will be overridden by `CLI.configure_optimizers`"):
        cli = build(flags)
    configured = cli.model.configure_optimizers()
    assert isinstance(configured["optimizer"], torch.optim.SGD) and configured["optimizer"].defaults["lr"] == 0.3
    assert configured["lr_scheduler"]["monitor"] == "val_loss"
    assert isinstance(build().model.configure_optimizers(), torch.optim.AdamW)  # no --optimizer: the model's own
    with pytest.raises(SystemExit):
        build("--optimizer SGD", auto_configure_optimizers=False)  # no such group then


# ---- the config saved with the run -----------------------------------------------------------
def test_save_config_kwargs_name_the_file_and_none_saves_nothing(tmp_path: Path) -> None:
    fit(tmp_path / "named", save_config_kwargs={"config_filename": "run.yaml"})
    assert yaml.safe_load((tmp_path / "named" / "run.yaml").read_text())["trainer"]["max_epochs"] == 1
    assert not (tmp_path / "named" / "config.yaml").exists()
    fit(tmp_path / "none", save_config_callback=None)
    assert not list((tmp_path / "none").glob("*.yaml"))


def test_another_runs_config_is_kept_unless_overwrite_or_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit(tmp_path, "--model.hidden 4")
    saved = (tmp_path / "config.yaml").read_text()
    with pytest.raises(RuntimeError, match=r"config.yaml to NOT exist. Aborting to avoid overwriting"):
        fit(tmp_path)  # a second run in the same folder (logger off: no version_N of its own): Lightning's error
    assert (tmp_path / "config.yaml").read_text() == saved
    fit(tmp_path, "--model.hidden 4 --trainer.max_epochs 2 --ckpt_path last")  # the same run continues
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["trainer"]["max_epochs"] == 2
    fit(tmp_path, "--model.hidden 5", save_config_kwargs={"overwrite": True})
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]["hidden"] == 5


def test_save_config_subclass_stores_it_elsewhere(tmp_path: Path) -> None:
    cli = fit(tmp_path, save_config_callback=LoggedConfig, save_config_kwargs={"save_to_log_dir": False})
    (callback,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, LoggedConfig)]
    assert callback.saved[0] == "fit" and yaml.safe_load(callback.saved[1]) == cli.config_dump
    assert not (tmp_path / "config.yaml").exists()
    with pytest.raises(ValueError, match="save_to_log_dir=False"):
        fit(tmp_path, save_config_kwargs={"save_to_log_dir": False})


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
        ("--seed_everything -1", "--seed_everything: MisconfigurationException: seed=-1 must be an int in [0, 2**32)"),
        ("--optimizer torch.optim.Nope", 'Parser key "optimizer"'),
    ],
)
def test_bad_values_exit_2_naming_the_flag(args: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        CLI(Model, Data, args=argv("fit", args), run=False)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_trainer_validation_error_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    result = run_cli("fit --trainer.precision 17 --trainer.default_root_dir", tmp_path)
    assert result.returncode == 2
    assert "error: invalid --trainer.* value: MisconfigurationException: Precision '17' is invalid" in result.stderr
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


# ---- a LightningCLI script, ported by its import lines alone ----------------------------------
LIGHTNING_SCRIPT = REPO / "tests" / "cli_fixtures" / "lightning_script.py"


def test_lightning_cli_script_runs_with_only_its_imports_changed(tmp_path: Path) -> None:
    lines = LIGHTNING_SCRIPT.read_text().splitlines()
    ported = [port(line) for line in lines]
    assert sum(a != b for a, b in zip(lines, ported)) == 3  # each Lightning import line, nothing else
    assert not any("lightning." in line for line in ported if line.startswith(("from ", "import ")))
    script = tmp_path / "train.py"
    script.write_text("\n".join(ported) + "\n")
    config = REPO / "tests" / "cli_fixtures" / "lightning_config.yaml"
    out = ok(run_cli("fit --config", config, script=script, cwd=tmp_path))
    assert "fitting 3 classes, seed 1234" in out  # instantiate link, seed_everything_default, before_fit
    assert "done after 2 epochs" in out  # the config file beat trainer_defaults' max_epochs; after_fit
    folder = tmp_path / "runs" / "blobs" / "version_0"  # the CSVLogger named in the config
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert saved["seed_everything"] == 1234 and saved["trainer"]["limit_train_batches"] == 2  # trainer_defaults
    assert saved["early_stopping"]["patience"] == 5 and "num_features" not in saved["model"]  # a link target
    checkpoint = load_checkpoint(folder / "checkpoints" / "last.ckpt")
    assert checkpoint["hyper_parameters"] == {"num_features": 2, "num_classes": 3, "hidden": 6, "lr": 0.2}
    for name in ("EarlyStopping", "ModelCheckpoint"):  # Lightning's keys: the class and its settings
        assert any(key.startswith(name + "{'monitor': 'val_loss'") for key in checkpoint["callbacks"])


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


def test_a_lightning_2_6_print_config_yaml_runs(tmp_path: Path) -> None:
    """What Lightning 2.6.6's ``fit --print_config`` writes (every Trainer key at its default) is a config of ours."""
    config = yaml.safe_load((REPO / "tests" / "cli_fixtures" / "lightning_2_6_6_print_config.yaml").read_text())
    path = write_yaml(tmp_path / "lightning.yaml", config)  # every key as Lightning wrote it
    ok(run_cli("fit --config", path, QUICK, "--trainer.default_root_dir", tmp_path / "runs"))
    assert list((tmp_path / "runs").glob("lightning_logs/version_0/checkpoints/*.ckpt"))


def test_lightning_class_paths_in_a_config_and_on_the_command_line(tmp_path: Path) -> None:
    """A LightningCLI project's YAML names Lightning's classes; read as ours, the file ports unchanged."""
    from trainer.lightning_paths import port_class_paths

    config = {
        "trainer": {
            "callbacks": [{"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"monitor": "x"}}],
            "logger": {"class_path": "lightning.pytorch.loggers.csv_logs.CSVLogger", "init_args": {"save_dir": "l"}},
        }
    }
    path = write_yaml(tmp_path / "lightning.yaml", config)
    extra = "--trainer.callbacks+=pytorch_lightning.callbacks.LearningRateMonitor"
    out = run_cli("fit --config", path, QUICK, extra, "--print_config")
    printed = yaml.safe_load(ok(out))["trainer"]
    assert [c["class_path"] for c in printed["callbacks"]] == [
        "trainer.callbacks.EarlyStopping",
        "trainer.callbacks.LearningRateMonitor",
    ]
    assert printed["logger"]["class_path"] == "trainer.loggers.CSVLogger"
    assert port_class_paths("lightning.pytorch.NoSuchThing") == "lightning.pytorch.NoSuchThing"  # left for jsonargparse
