"""CLI and callback subclasses as a LightningCLI user writes them, for tests/test_cli.py."""

from __future__ import annotations

from typing import Any

from trainer import Callback, EarlyStopping, Trainer
from trainer.cli import CLI, ArgumentParser, SaveConfigCallback


class Marker(Callback):
    """A callback only ``trainer_defaults`` adds."""


class LinkedCLI(CLI):
    """``--data.size`` sets the model's width: the link Lightning users write for num_classes."""

    apply_on = "parse"

    def add_arguments_to_parser(self, parser: ArgumentParser) -> None:
        parser.link_arguments("data.size", "model.hidden", apply_on=self.apply_on)
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults({"early_stopping.monitor": "val_loss"})


class HookedCLI(CLI):
    """Records the hooks in the order they run; changes the config before anything is built."""

    def before_instantiate_classes(self) -> None:
        self.calls = ["before_instantiate_classes"]
        self.config[self.subcommand].model.hidden = 5

    def after_instantiate_classes(self) -> None:
        self.calls.append(f"after_instantiate_classes:{self.model.net[0].out_features}")

    def before_fit(self) -> None:
        self.calls.append("before_fit")

    def after_fit(self) -> None:
        self.calls.append(f"after_fit:{self.trainer.current_epoch}")

    def before_validate(self) -> None:
        self.calls.append("before_validate")

    def after_validate(self) -> None:
        self.calls.append(f"after_validate:{sorted(self.trainer.callback_metrics)}")


class LoggedConfig(SaveConfigCallback):
    """Keeps the config it was asked to store elsewhere (with save_to_log_dir=False: only there)."""

    def save_config(self, trainer: Trainer, module: Any, stage: str) -> None:
        self.saved = (stage, self.parser.dump(self.config, skip_unset=False))
