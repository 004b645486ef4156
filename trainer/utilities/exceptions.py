"""Lightning's ``utilities.exceptions`` path (the types are defined low, in ``trainer.exceptions``)."""

from trainer.exceptions import MisconfigurationException, SIGTERMException

__all__ = ["MisconfigurationException", "SIGTERMException"]
