"""``CLI``: LightningCLI's constructor, hooks and semantics, building a steadytrain Trainer.

The order of work is Lightning's, so a ``LightningCLI`` subclass behaves the same: build the
parser(s) (``add_arguments_to_parser`` last), parse, seed, ``before_instantiate_classes``, build
data, model and Trainer, ``after_instantiate_classes``, then ``before_<subcommand>``, the
subcommand and ``after_<subcommand>``. Parsing, seeding and construction write no files, so a
DDP self-launch can re-run the same command line in every rank and get the same objects.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ActionConfigFile, Namespace, class_from_function

import trainer as _package
import trainer.cli.optimizers as optimizers
from trainer.callbacks.base import Callback
from trainer.cli.help_text import plain, usage
from trainer.cli.instantiate import Instantiator, built_type
from trainer.cli.parser import ArgumentParser
from trainer.cli.save_config import SaveConfigCallback
from trainer.cli.subcommands import (
    DEFAULT_SUBCOMMANDS,
    call_if_defined,
    checkpoint_model_config,
    short_description,
    starts_with_subcommand,
)
from trainer.datamodule import DataModule
from trainer.exceptions import MisconfigurationException
from trainer.lightning_paths import port_class_paths_in
from trainer.module import Module
from trainer.seed import seed_everything
from trainer.trainer import Trainer

SUBCOMMANDS = DEFAULT_SUBCOMMANDS  # our earlier name


class CLI:
    """Parse the command line, build data module, model and Trainer, then run the subcommand.

    ``model_class``/``datamodule_class`` fix the classes; with ``subclass_mode_model``/``_data`` (or
    no class) they are chosen by import path: ``--model pkg.mod.Model --model.init_args.x 1``.
    ``run=False``: no subcommand, nothing runs; use ``.trainer``, ``.model``, ``.datamodule`` and ``.config``.
    Define ``before_<subcommand>``/``after_<subcommand>`` (``before_fit``, ``after_test``, ...) to run code around
    a subcommand, as in LightningCLI.
    """

    def __init__(
        self,
        model_class: type[Module] | Callable[..., Module] | None = None,
        datamodule_class: type[DataModule] | Callable[..., DataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Callable[..., Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int | None = True,
        parser_kwargs: dict[str, Any] | None = None,
        parser_class: type[ArgumentParser] = ArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: list[str] | dict[str, Any] | Namespace | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
        *,
        subclass_mode: bool = False,
    ) -> None:
        """Arguments as LightningCLI's; ``subclass_mode=True`` sets both ``subclass_mode_*`` (our older name)."""
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = dict(save_config_kwargs or {})
        self.trainer_class = trainer_class
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = dict(parser_kwargs or {})
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.load_from_checkpoint_support = load_from_checkpoint_support  # False: modules save their own init args
        self.model_class = model_class
        self.datamodule_class = datamodule_class
        self.subclass_mode_model = model_class is None or subclass_mode_model or subclass_mode
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data or subclass_mode

        # Earlier steadytrain built a named subcommand with run=False; Lightning would reject the name.
        with_subcommands = run or starts_with_subcommand(args, self.subcommands())
        self._subcommand_method_arguments: dict[str, list[str]] = {}
        self.setup_parser(with_subcommands, *self._split_parser_kwargs())
        self.parse_arguments(self.parser, args)
        self.subcommand: str | None = self.config["subcommand"] if with_subcommands else None
        self._parse_ckpt_path(args)
        self.ckpt_path: str | None = self._subconfig(self.config).get("ckpt_path")
        self._check_ckpt_path()
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        # Plain values only (what YAML round-trips): it goes into checkpoints and logger hparams.
        self.config_dump: dict[str, Any] = yaml.safe_load(
            self._parser(self.subcommand).dump(self._subconfig(self.config), skip_unset=False)
        )
        self.trainer.config = self.config_dump
        self.result: Any = None
        if run:
            self.result = self.run()

    # ---- parser construction (override points named as in LightningCLI) ------------------
    def init_parser(self, **kwargs: Any) -> ArgumentParser:
        """One parser with ``-c/--config``; abbreviations off, so a later flag never changes what one means."""
        kwargs.setdefault("dump_header", [f"steadytrain=={_package.__version__}"])
        kwargs.setdefault("allow_abbrev", False)
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile, help="YAML config file(s), merged in order.")
        return parser

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any], sub_kwargs: dict[str, Any]) -> None:
        """``self.parser``: with subcommands, a root parser whose ``self.parsers[name]`` hold the flags."""
        self.parsers: dict[str, ArgumentParser] = {}
        if add_subcommands:
            main_kwargs.setdefault("description", "Train, validate, test or predict with a steadytrain Module.")
            self.parser = self.init_parser(**main_kwargs)
            subcommands = self.parser.add_subcommands(required=True)
            trainer_class = self._trainer_type()
            for name in self.subcommands():
                description = plain(short_description(getattr(trainer_class, name)))
                kwargs = dict(sub_kwargs.get(name, {}))
                kwargs.setdefault("description", description)
                self.parsers[name] = self._subcommand_parser(trainer_class, name, **kwargs)
                subcommands.add_subcommand(name, self.parsers[name], help=description)
        else:
            main_kwargs.setdefault("usage", usage(with_ckpt_path=False))
            self.parser = self.init_parser(**main_kwargs)
            self._add_arguments(self.parser)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Override to add a subcommand (a method of the Trainer) and the method's arguments the CLI passes itself."""
        return {name: set(skip) for name, skip in DEFAULT_SUBCOMMANDS.items()}

    def add_default_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """``--seed_everything``: an int seeds with it, true keeps an exported seed (else 0), false/null skips."""
        parser.add_argument(
            "--seed_everything",
            type=bool | int | None,
            default=self.seed_everything_default,
            help="Seed python/numpy/torch before building anything: an int, true (the exported seed, else 0), "
            "or false/null (leave unseeded).",
        )

    def add_core_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """``--trainer.*`` (with ``trainer_defaults`` as defaults), ``--model.*`` and ``--data.*``."""
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        defaults = {
            f"trainer.{key}": port_class_paths_in(value)
            for key, value in self.trainer_defaults.items()
            if key != "callbacks"
        }
        try:
            parser.set_defaults(defaults)
        except (KeyError, ValueError) as err:  # a typo or a bare instance: a bug in the script, not in the flags
            raise MisconfigurationException(
                f"trainer_defaults: {err} (give objects as jsonargparse.lazy_instance)"
            ) from err
        parser.add_lightning_class_args(self.model_class or Module, "model", subclass_mode=self.subclass_mode_model)
        required = self.datamodule_class is not None  # without one, the model's own loaders may serve
        data_class = self.datamodule_class or DataModule
        parser.add_lightning_class_args(data_class, "data", subclass_mode=self.subclass_mode_data, required=required)

    def add_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """Override to add arguments (``add_lightning_class_args``) or links (``link_arguments``)."""

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: ArgumentParser) -> None:
        """Link optimizer/scheduler groups registered with a ``link_to`` key to that key."""
        parser.link_optimizers_and_lr_schedulers()

    def parse_arguments(self, parser: ArgumentParser, args: list[str] | dict[str, Any] | Namespace | None) -> None:
        """``self.config``: command-line style ``args`` (``sys.argv`` when None), or a dict/Namespace config."""
        if args is not None and len(sys.argv) > 1:
            warnings.warn(
                "LightningCLI's args parameter (steadytrain's CLI(args=...)) is intended to run from within Python "
                "like if it were from the command line: it replaces the command line, which is not empty. To prevent "
                f"mistakes pass one or the other; got sys.argv[1:]={sys.argv[1:]}, args={args}.",
                UserWarning,
                stacklevel=3,
            )
        self.config = _parsed(parser, args)

    def _parse_ckpt_path(self, args: list[str] | dict[str, Any] | Namespace | None) -> None:
        """Lightning's rule: a subcommand's ``--ckpt_path`` file gives the model's hyper-parameters, so ``test
        --ckpt_path x.ckpt`` builds the model the checkpoint was trained as. Unlike Lightning, the command line
        (flags and ``--config`` files) still wins over them: what a user writes is never silently replaced."""
        if self.subcommand is None:
            return
        ckpt_path = self.config[self.subcommand].get("ckpt_path")
        model = checkpoint_model_config(ckpt_path)
        if model is None:
            return
        try:
            under = self.parser.parse_object({self.subcommand: {"model": model}}, self.config)
        except SystemExit:
            sys.stderr.write(f"Parsing of ckpt_path hyperparameters failed! ({ckpt_path})\n")
            raise
        self.config = _parsed(self.parser, args, under)

    def _subcommand_parser(self, trainer_class: type, name: str, **kwargs: Any) -> ArgumentParser:
        kwargs.setdefault("usage", usage(with_ckpt_path=True))
        parser = self.init_parser(**kwargs)
        self._add_arguments(parser)
        skip: set[str | int] = set(self.subcommands()[name])
        self._subcommand_method_arguments[name] = parser.add_method_arguments(trainer_class, name, skip=skip)
        return parser

    def _trainer_type(self) -> type:
        trainer_class = self.trainer_class
        return trainer_class if isinstance(trainer_class, type) else class_from_function(trainer_class)

    def _add_arguments(self, parser: ArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser.optimizers:
                parser.add_optimizer_args()
            if not parser.lr_schedulers:
                parser.add_lr_scheduler_args()
        self.link_optimizers_and_lr_schedulers(parser)

    def _split_parser_kwargs(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``parser_kwargs`` keys named after a subcommand go to that subcommand's parser; the rest to the main one."""
        names = self.subcommands()
        main = {k: v for k, v in self.parser_kwargs.items() if k not in names}
        per_subcommand = {k: dict(v) for k, v in self.parser_kwargs.items() if k in names}
        return main, per_subcommand

    # ---- seeding and building ------------------------------------------------------------
    def _set_seed(self) -> None:
        """Seed as ``--seed_everything`` says, and record the seed used so the saved config repeats the run."""
        config = self._subconfig(self.config)
        value = config.get("seed_everything")
        if value is None or value is False:
            return
        try:
            seed = seed_everything(None if value is True else value, workers=True)  # True: the exported seed, else 0
        except ValueError as err:
            self._parser(self.subcommand).usage_error("--seed_everything", err)
        config["seed_everything"] = seed

    def before_instantiate_classes(self) -> None:
        """Override to change ``self.config`` before anything is built."""

    def instantiate_classes(self) -> None:
        """``self.config_init`` (the built config), ``self.datamodule``, ``self.model`` and ``self.trainer``."""
        if self.load_from_checkpoint_support:
            self._add_instantiators()
        try:
            self.config_init = self.parser.instantiate(self.config)
        except (ValueError, TypeError) as err:
            self._parser(self.subcommand).usage_error("could not build --model/--data/--trainer.* objects", err)
        self.datamodule: DataModule | None = self._get(self.config_init, "data")
        self.model: Module = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model()
        self.trainer = self.instantiate_trainer()

    def _add_instantiators(self) -> None:
        """The model and datamodule are built saving their config as hyper-parameters (Lightning's rule): what
        ``save_hyperparameters()`` records and ``load_from_checkpoint`` rebuilds them from, nested classes included."""
        self._hparams_source: dict[str, Any] = yaml.safe_load(
            self._parser(self.subcommand).dump(self._subconfig(self.config), skip_link_targets=False, skip_none=False)
        )
        for key, built, base, subclasses in (
            ("model", self.model_class, Module, self.subclass_mode_model),
            ("data", self.datamodule_class, DataModule, self.subclass_mode_data),
        ):
            self.parser.add_instantiator(Instantiator(self, key), built_type(built, base), subclasses=subclasses)

    def after_instantiate_classes(self) -> None:
        """Override to run code once everything is built (before the subcommand)."""

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Build the Trainer from ``--trainer.*`` (``kwargs`` win); the CLI's callbacks join the configured ones, and
        the config is saved (``save_config_callback``) unless the run is a ``fast_dev_run`` (Lightning's rules)."""
        parser = self._parser(self.subcommand)
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        if "callbacks" not in config:  # a Trainer class (or builder function) without a callbacks argument
            warnings.warn(
                f"The `{self.trainer_class.__qualname__}` class does not expose the `callbacks` argument so they will "
                "not be included.",
                UserWarning,
                stacklevel=2,
            )
            return self._build_trainer(parser, config)
        config["callbacks"] = [
            *_as_list(config["callbacks"]),
            *(self._get(self.config_init, key) for key in parser.callback_keys),
            *self._default_callbacks(),
        ]
        if self.save_config_callback is not None and not config.get("fast_dev_run", False):
            saver = self.save_config_callback(parser, self._subconfig(self.config), **self.save_config_kwargs)
            config["callbacks"].append(saver)
        return self._build_trainer(parser, config)

    def _default_callbacks(self) -> list[Callback]:
        """``trainer_defaults["callbacks"]``: objects, or ``{"class_path", "init_args"}`` dicts built here."""
        given = self.trainer_defaults.get("callbacks")
        given = given if isinstance(given, list | tuple) else [] if given is None else [given]
        return [optimizers.instantiate_class((), port_class_paths_in(c)) if isinstance(c, dict) else c for c in given]

    def _build_trainer(self, parser: ArgumentParser, config: dict[str, Any]) -> Trainer:
        try:
            return self.trainer_class(**config)
        except (ValueError, TypeError) as err:
            parser.usage_error("invalid --trainer.* value", err)

    @staticmethod
    def configure_optimizers(module: Module, optimizer: Any, lr_scheduler: Any = None) -> Any:
        """Override to change what ``--optimizer``/``--lr_scheduler`` make ``configure_optimizers`` return."""
        return optimizers.configure_optimizers(module, optimizer, lr_scheduler)

    def _add_configure_optimizers_method_to_model(self) -> None:
        """With ``--optimizer`` given (an AUTOMATIC group), the model's optimizers come from it."""
        if self.auto_configure_optimizers:
            parser = self._parser(self.subcommand)
            optimizers.add_configure_optimizers(self, parser, self._subconfig(self.config_init))

    # ---- running ---------------------------------------------------------------------------
    def run(self) -> Any:
        """``before_<subcommand>``, the subcommand (the CLI's method of that name, else the Trainer's), ``after_``."""
        name = self.subcommand
        if name is None:
            raise RuntimeError("run() needs a subcommand: this CLI was built with run=False and no subcommand.")
        call_if_defined(self, f"before_{name}")
        method = getattr(self, name, None) or getattr(self.trainer, name)
        result = method(**self._prepare_subcommand_kwargs(name))
        call_if_defined(self, f"after_{name}")
        return result

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        """The subcommand's own flags, the model, and the datamodule when there is one (Lightning's call)."""
        config = self.config_init[subcommand]
        kwargs = {k: v for k, v in config.items() if k in self._subcommand_method_arguments[subcommand]}
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        return kwargs

    # ---- helpers ---------------------------------------------------------------------------
    def _parser(self, subcommand: str | None) -> ArgumentParser:
        """The parser holding the flags: the subcommand's, or the only one when run=False."""
        return self.parser if subcommand is None else self.parsers[subcommand]

    def _subconfig(self, config: Namespace) -> Namespace:
        return config if self.subcommand is None else config[self.subcommand]

    def _get(self, config: Namespace, key: str, default: Any = None) -> Any:
        return self._subconfig(config).get(key, default)

    def _check_ckpt_path(self) -> None:
        if self.ckpt_path not in (None, "last") and not Path(self.ckpt_path).is_file():
            self._parser(self.subcommand).error(
                f'--ckpt_path {self.ckpt_path}: no such file (give a checkpoint file or "last").'
            )


def _parsed(
    parser: ArgumentParser, args: list[str] | dict[str, Any] | Namespace | None, base: Namespace | None = None
) -> Namespace:
    """``args`` parsed over ``base`` (the defaults when None): command-line style (``sys.argv`` when None), or a
    dict/Namespace config."""
    if isinstance(args, dict | Namespace):
        return parser.parse_object(args, base)
    return parser.parse_args(args, namespace=base)


def _as_list(callbacks: Callback | Iterable[Callback] | None) -> list[Callback]:
    if callbacks is None:
        return []
    return [callbacks] if isinstance(callbacks, Callback) else list(callbacks)


def main(args: list[str] | None = None) -> None:
    """The ``steadytrain`` console script and ``python -m trainer``: classes come by import path."""
    CLI(args=args)
