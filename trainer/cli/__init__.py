"""A command line from type hints and docstrings: ``python train.py fit --config run.yaml --trainer.x 1``.

jsonargparse builds every flag from the signatures of ``Trainer.__init__`` (``--trainer.*``), the
Module (``--model.*``) and the DataModule (``--data.*``), so adding an ``__init__`` argument adds a
flag. ``CLI`` takes LightningCLI's arguments and hooks with the same meaning, so a LightningCLI
script ports by its import lines alone::

    from trainer.cli import CLI as LightningCLI
    from trainer.cli import ArgumentParser as LightningArgumentParser

Changing a callable's class on the command line keeps the init args the new class shares with the
old one (jsonargparse's rule): ``--model.optimizer torch.optim.SGD`` after an AdamW default keeps
AdamW's ``weight_decay``. ``--print_config`` shows what was resolved.
"""

from trainer.cli.core import CLI, SUBCOMMANDS, main
from trainer.cli.instantiate import instantiate_module
from trainer.cli.optimizers import (
    LRSchedulerCallable,
    LRSchedulerType,
    LRSchedulerTypeTuple,
    LRSchedulerTypeUnion,
    OptimizerCallable,
    ReduceLROnPlateau,
    instantiate_class,
)
from trainer.cli.parser import ArgumentParser
from trainer.cli.save_config import ConfigExistsError, SaveConfigCallback

__all__ = [
    "CLI",
    "SUBCOMMANDS",
    "ArgumentParser",
    "ConfigExistsError",
    "LRSchedulerCallable",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "OptimizerCallable",
    "ReduceLROnPlateau",
    "SaveConfigCallback",
    "instantiate_class",
    "instantiate_module",
    "main",
]
