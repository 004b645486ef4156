"""A command line from type hints and docstrings: ``python train.py fit --config run.yaml --trainer.x 1``.

jsonargparse builds every flag from the signatures of ``Trainer.__init__`` (``--trainer.*``), the
Module (``--model.*``) and the DataModule (``--data.*``), so adding an ``__init__`` argument adds a
flag. Parsing, seeding and construction have no side effects beyond the process (no files), so a
DDP self-launch can re-run the same command line in every rank and get the same objects.

Changing a callable's class on the command line keeps the init args the new class shares with the
old one (jsonargparse's rule): ``--model.optimizer torch.optim.SGD`` after an AdamW default keeps
AdamW's ``weight_decay``. ``--print_config`` shows what was resolved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import torch
import yaml
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

from trainer.callbacks.base import Callback
from trainer.datamodule import DataModule
from trainer.module import Module
from trainer.seed import seed_everything
from trainer.trainer import Trainer

# Type ``Module.__init__`` arguments with these to choose the optimizer / scheduler from the CLI:
# ``--model.optimizer torch.optim.SGD --model.optimizer.lr 0.1`` gives ``optimizer(params) -> SGD``.
OptimizerCallable = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
LRSchedulerCallable = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]

SUBCOMMANDS = {
    "fit": "Train the model (--ckpt_path resumes a run exactly).",
    "validate": "Run the validation set once (--ckpt_path loads weights first).",
    "test": "Run the test set once (--ckpt_path loads weights first).",
    "predict": "Run predict_step over the predict set (--ckpt_path loads weights first).",
}

# A short usage line, so an error message is not buried under every flag (--help lists them).
_USAGE = (
    "%(prog)s [--config FILE] [--print_config] [--seed_everything N] [--trainer.* ...] [--model.* ...] "
    "[--data.* ...] [--ckpt_path PATH]"
)

__all__ = ["CLI", "LRSchedulerCallable", "OptimizerCallable", "SaveConfigCallback", "main"]


class SaveConfigCallback(Callback):
    """Writes the resolved config as ``config.yaml`` in the run folder: ``fit --config`` repeats the run."""

    def __init__(self, config: dict[str, Any], filename: str = "config.yaml") -> None:
        self.config = config
        self.filename = filename

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """At fit start a resumed run's logger already points back at the run it continues."""
        if not trainer.is_global_zero:
            return
        path = trainer.log_dir / self.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))


class CLI:
    """Parse the command line, build model, data module and Trainer, then run the subcommand.

    ``model_class``/``datamodule_class`` fix the classes; with ``subclass_mode`` (or no model class)
    they are chosen by import path: ``--model pkg.mod.Model --model.init_args.x 1``. With
    ``run=False`` nothing runs: use ``.trainer``, ``.model``, ``.datamodule`` and ``.config``.
    """

    def __init__(
        self,
        model_class: type[Module] | None = None,
        datamodule_class: type[DataModule] | None = None,
        args: list[str] | None = None,
        run: bool = True,
        subclass_mode: bool = False,
    ) -> None:
        self.parsers = {name: _stage_parser(name, model_class, datamodule_class, subclass_mode) for name in SUBCOMMANDS}
        parsed = _root_parser(self.parsers).parse_args(args)
        self.subcommand: str = parsed.subcommand
        self.parser = self.parsers[self.subcommand]
        cfg: Namespace = parsed[self.subcommand]
        _check_ckpt_path(self.parser, cfg.ckpt_path)
        # Plain values only (what YAML round-trips): it goes into checkpoints and logger hparams.
        self.config: dict[str, Any] = yaml.safe_load(self.parser.dump(cfg, skip_unset=False))
        self.ckpt_path: str | None = cfg.ckpt_path
        if cfg.seed_everything is not None:
            seed_everything(cfg.seed_everything)
        self.model, self.datamodule, self.trainer = self._build(cfg)
        self.trainer.config = self.config
        self.result: Any = None
        if run:
            self.result = self.run()

    def _build(self, cfg: Namespace) -> tuple[Module, DataModule | None, Trainer]:
        """Instantiate everything; a constructor's ValueError/TypeError is a usage error (exit 2)."""
        try:
            built = self.parser.instantiate(cfg)
        except (ValueError, TypeError) as err:
            _usage_error(self.parser, "could not build --model/--data/--trainer.* objects", err)
        trainer_kwargs = dict(built.trainer)
        callbacks = _as_list(trainer_kwargs.pop("callbacks"))
        if self.subcommand == "fit":
            callbacks.append(SaveConfigCallback(self.config))
        try:
            trainer = Trainer(**trainer_kwargs, callbacks=callbacks)
        except (ValueError, TypeError) as err:
            _usage_error(self.parser, "invalid --trainer.* value", err)
        return built.model, built.get("data"), trainer

    def run(self) -> Any:
        """Call ``Trainer.<subcommand>``; validate/test print their metrics (rank zero) for the shell user."""
        method = getattr(self.trainer, self.subcommand)
        result = method(self.model, datamodule=self.datamodule, ckpt_path=self.ckpt_path)
        if self.subcommand in ("validate", "test") and self.trainer.is_global_zero:
            for metrics in result:
                print("\n".join(f"{k}: {v:.6g}" for k, v in sorted(metrics.items())), flush=True)
        return result


def _root_parser(parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    parser = ArgumentParser(
        description="Train, validate, test or predict with a steadytrain Module.", allow_abbrev=False
    )
    subcommands = parser.add_subcommands(required=True)
    for name, subparser in parsers.items():
        subcommands.add_subcommand(name, subparser, help=SUBCOMMANDS[name])
    return parser


def _stage_parser(
    stage: str,
    model_class: type[Module] | None,
    datamodule_class: type[DataModule] | None,
    subclass_mode: bool,
) -> ArgumentParser:
    """One subcommand's flags: --config/--print_config, seed, trainer, model, data, ckpt_path."""
    # Abbreviations off: a flag added later must not silently change what "--trainer.max_ep" means.
    parser = ArgumentParser(description=SUBCOMMANDS[stage], usage=_USAGE, allow_abbrev=False)
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file(s), merged in order.")
    parser.add_argument(
        "--seed_everything",
        type=int | None,
        default=0,
        help="Seed python/numpy/torch before building the model (null: leave unseeded).",
    )
    parser.add_class_arguments(Trainer, "trainer", instantiate=False, fail_untyped=False, sub_configs=True)
    if subclass_mode or model_class is None:
        parser.add_subclass_arguments(model_class or Module, "model", fail_untyped=False, required=True)
        parser.add_subclass_arguments(datamodule_class or DataModule, "data", fail_untyped=False, required=False)
    else:
        parser.add_class_arguments(model_class, "model", fail_untyped=False, sub_configs=True)
        if datamodule_class is not None:
            parser.add_class_arguments(datamodule_class, "data", fail_untyped=False, sub_configs=True)
    parser.add_argument(
        "--ckpt_path",
        type=str | None,
        default=None,
        help='Checkpoint to resume (fit) or to load weights from; "last": the newest one.',
    )
    return parser


def _check_ckpt_path(parser: ArgumentParser, ckpt_path: str | None) -> None:
    if ckpt_path not in (None, "last") and not Path(ckpt_path).is_file():
        parser.error(f'--ckpt_path {ckpt_path}: no such file (give a checkpoint file or "last").')


def _as_list(callbacks: Callback | Iterable[Callback] | None) -> list[Callback]:
    if callbacks is None:
        return []
    return [callbacks] if isinstance(callbacks, Callback) else list(callbacks)


def _usage_error(parser: ArgumentParser, what: str, err: Exception) -> NoReturn:
    """Report through the parser (usage, one line, exit 2), not as a traceback."""
    parser.error(f"{what}: {type(err).__name__}: {err}")


def main(args: list[str] | None = None) -> None:
    """The ``steadytrain`` console script and ``python -m trainer``: classes come by import path."""
    CLI(args=args, subclass_mode=True)
