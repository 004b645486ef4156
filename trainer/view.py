"""``TrainerView``: the Trainer's type, as the code below it names it in its type hints.

The loops, callbacks, the module and the checkpoint code are handed the Trainer, and the Trainer
imports them. They import its type from here, under ``TYPE_CHECKING``: the type checker reads
``trainer.trainer``, a run never imports it from below, and the Trainer's surface is written once,
in ``trainer/trainer.py``. At run time this module imports nothing; ``tests/test_architecture.py``
pins that nothing else below the Trainer names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.trainer import Trainer as TrainerView

__all__ = ["TrainerView"]
