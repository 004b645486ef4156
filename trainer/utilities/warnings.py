"""Lightning's ``utilities.warnings`` path for ``PossibleUserWarning`` (defined low, in ``trainer.user_warnings``,
so the data and loop layers can raise it)."""

from trainer.user_warnings import PossibleUserWarning

__all__ = ["PossibleUserWarning", "disable_possible_user_warnings"]


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore ``PossibleUserWarning`` (from ``module`` and below, if given): the advice a run gives about
    settings that may be unintended, once you have read it."""
    import warnings

    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)
