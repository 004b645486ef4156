"""``lightning.pytorch.utilities.seed``'s names: a port's ``from trainer.utilities.seed import isolate_rng``."""

from trainer.seed import isolate_rng, seed_everything

__all__ = ["isolate_rng", "seed_everything"]
