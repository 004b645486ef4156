"""Lightning's remaining callbacks on tiny CPU runs: ModelPruning, weight averaging, RichModelSummary,
ThroughputMonitor and SpikeDetection, used as a user writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ModelPruning
from trainer.exceptions import MisconfigurationException


def data(n: int = 32, batch_size: int = 8) -> torch.utils.data.DataLoader:
    return loader(regression_data(n), batch_size=batch_size)


# ---- ModelPruning -------------------------------------------------------------------------------------------
def test_pruning_zeroes_the_asked_fraction_and_checkpoints_plain_weights(tmp_path: Path) -> None:
    model = Regressor()
    first = model.net[0]
    pruning = ModelPruning("l1_unstructured", parameters_to_prune=[(first, "weight")], amount=0.25)
    quiet(tmp_path, max_epochs=2, callbacks=[pruning], enable_checkpointing=True).fit(model, data())
    # two epochs of 25% of what is left: 1 - 0.75**2 of the weights are zero; the pruning is permanent
    zeros = int((first.weight == 0).sum())
    assert zeros == round(first.weight.numel() * 0.25) + round((first.weight.numel() - 32) * 0.25)
    assert not hasattr(first, "weight_mask") and isinstance(first.weight, torch.nn.Parameter)
    saved = torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=False)["state_dict"]
    assert "net.0.weight" in saved and not any(k.endswith(("_orig", "_mask")) for k in saved)


def test_pruning_amount_by_epoch_and_bad_arguments(tmp_path: Path) -> None:
    model = Regressor()
    pruning = ModelPruning("random_unstructured", amount=lambda epoch: 0.5 if epoch == 1 else 0, verbose=1)
    quiet(tmp_path, max_epochs=2, callbacks=[pruning]).fit(model, data())
    # amount 0 at epoch 0 prunes nothing; epoch 1 prunes half of every weight and bias together
    total = sum(p.numel() for p in model.parameters())
    assert int(sum((p == 0).sum() for p in model.parameters())) == round(total * 0.5)
    with pytest.raises(MisconfigurationException, match="pruning_dim"):
        ModelPruning("ln_structured", use_global_unstructured=False)
    with pytest.raises(MisconfigurationException, match="isn't available"):
        ModelPruning("l3_unstructured")
    with pytest.raises(MisconfigurationException, match="parameter_names"):
        ModelPruning("l1_unstructured", parameter_names=["gamma"])
