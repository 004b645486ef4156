"""Lightning's ``PossibleUserWarning``: a warning about what may be intended (``warnings.filterwarnings("ignore",
category=PossibleUserWarning)`` silences them all); and its ``LightningDeprecationWarning``."""


class PossibleUserWarning(UserWarning):
    """Something that may be a mistake, or may be what you meant (an epoch shorter than the log interval, ...)."""


class LightningDeprecationWarning(DeprecationWarning):
    """Lightning's category for its deprecation notices (shown by default, as Lightning's are)."""
