"""Lightning's ``utilities.warnings`` path for ``PossibleUserWarning`` (defined low, in ``trainer.user_warnings``,
so the data and loop layers can raise it)."""

from trainer.user_warnings import PossibleUserWarning

__all__ = ["PossibleUserWarning"]
