"""The default generator's stream under fit is Lightning 2.6's, draw for draw (one device, no workers).

The same module runs under Lightning and under steadytrain with the same seed; a fingerprint of the
default generator (no draw) is taken in every step, at the epochs' ends and after fit. Dropout,
``torch.randn_like`` noise in ``training_step``, augmentation in ``__getitem__``, shuffled training
data and a validation every epoch all draw from it. Skipped where ``lightning`` is not installed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.models import NoisyDataset, regression_data


def fingerprint() -> str:
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12]


def probe_module(base: type) -> Any:
    class Probe(base):  # type: ignore[misc, valid-type]
        def __init__(self, shuffle: bool) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 1))
            self.shuffle, self.seen = shuffle, []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen.append(("train", fingerprint()))
            x, y = batch
            return nn.functional.mse_loss(self.net(x + 0.01 * torch.randn_like(x)), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.seen.append(("val", fingerprint()))
            torch.rand(2)  # a validation that draws, as random augmentation would

        def on_train_start(self) -> None:
            self.seen.append(("train_start", fingerprint()))
            torch.rand(1)  # a hook that draws: epoch 0's iter() must already have drawn, as in Lightning

        def on_train_epoch_start(self) -> None:
            self.seen.append(("epoch_start", fingerprint()))

        def on_train_epoch_end(self) -> None:
            self.seen.append(("epoch_end", fingerprint()))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(NoisyDataset(regression_data(24)), batch_size=8, shuffle=self.shuffle)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(regression_data(16), batch_size=8)

    return Probe


def run(framework: str, tmp_path: Path, shuffle: bool, sanity: int) -> tuple[list[Any], list[torch.Tensor]]:
    if framework == "lightning":
        import lightning.pytorch as pl

        base, trainer_cls, seed = pl.LightningModule, pl.Trainer, pl.seed_everything
    else:
        import trainer as st

        base, trainer_cls, seed = st.Module, st.Trainer, st.seed_everything
    seed(11)
    module = probe_module(base)(shuffle)
    fit = trainer_cls(
        max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=sanity,
        default_root_dir=tmp_path / framework,
    )  # fmt: skip
    fit.fit(module)
    module.seen.append(("after_fit", fingerprint()))
    return module.seen, [p.detach().clone() for p in module.parameters()]


@pytest.mark.slow  # Lightning's import and six fits: long for the default suite
@pytest.mark.parametrize(("shuffle", "sanity"), [(False, 2), (True, 2), (True, 0)])
def test_every_draw_of_fit_is_lightnings(tmp_path: Path, shuffle: bool, sanity: int) -> None:
    pytest.importorskip("lightning")
    theirs, their_params = run("lightning", tmp_path, shuffle, sanity)
    ours, our_params = run("steadytrain", tmp_path, shuffle, sanity)
    assert ours == theirs
    for a, b in zip(our_params, their_params, strict=True):
        assert torch.equal(a, b)
