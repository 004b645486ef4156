"""Lightning's ``PossibleUserWarning``: a warning about what may be intended (``warnings.filterwarnings("ignore",
category=PossibleUserWarning)`` silences them all)."""


class PossibleUserWarning(UserWarning):
    """Something that may be a mistake, or may be what you meant (an epoch shorter than the log interval, ...)."""
