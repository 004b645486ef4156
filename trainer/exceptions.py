"""Lightning's exception types, raised where Lightning raises them, so ``except MisconfigurationException`` in a
ported script catches ours.

``MisconfigurationException`` is a ``ValueError``: steadytrain's configuration errors were ValueErrors before they
took Lightning's name, and ``except ValueError`` still catches them.
"""


class MisconfigurationException(ValueError):
    """A flag, hook or object the Trainer cannot run as given; the message names the value and what is valid."""


class MisconfigurationTypeError(MisconfigurationException, TypeError):
    """A flag of the wrong type: caught as Lightning's ``MisconfigurationException`` and as Python's ``TypeError``."""


class MisconfigurationRuntimeError(MisconfigurationException, RuntimeError):
    """A module the Trainer cannot run as written, where Lightning raises ``RuntimeError`` (several optimizers in
    automatic optimization): caught as either."""


class SIGTERMException(SystemExit):
    """A SIGTERM ended fit: raised once ``interrupted.ckpt`` is saved (exit status 0), so a callback's
    ``on_exception`` can tell a termination from a failure."""


class TunerExit(Exception):
    """The Tuner's search ran at the start of the stage it called and ends that stage early: the stage tears
    down as after a success (no ``on_exception``), and the Tuner catches this (Lightning's ``_TunerExitException``)."""
