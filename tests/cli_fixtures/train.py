"""A user's training script: ``python tests/cli_fixtures/train.py fit --trainer.max_epochs 1 ...``."""

from tests.cli_fixtures.tiny import Data, Model
from trainer.cli import CLI

if __name__ == "__main__":
    CLI(Model, Data)
