"""Lightning's remaining callbacks on tiny CPU runs: ModelPruning, weight averaging, RichModelSummary,
ThroughputMonitor and SpikeDetection, used as a user writes them."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import EMAWeightAveraging, ModelPruning, WeightAveraging
from trainer.exceptions import MisconfigurationException
from trainer.loggers.base import Logger


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


def test_pruning_after_validation_keeps_training(tmp_path: Path) -> None:
    # validation runs under inference mode; the masks made there must still let the next epoch train
    model = Regressor()
    pruning = ModelPruning("l1_unstructured", amount=0.5, prune_on_train_epoch_end=False, make_pruning_permanent=False)
    quiet(tmp_path, max_epochs=2, callbacks=[pruning]).fit(model, data(), data())
    mask = model.net[0].weight_mask
    assert not mask.is_inference() and int((mask == 0).sum()) > 0


# ---- WeightAveraging / EMAWeightAveraging -------------------------------------------------------------------
class Recorder(Regressor):
    """Keeps its weights after every optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[torch.Tensor]] = []

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        self.seen.append([p.detach().clone() for p in self.parameters()])


def test_weight_averaging_ends_on_the_mean_of_every_step_and_checkpoints_it(tmp_path: Path) -> None:
    model = Recorder()
    run = quiet(tmp_path, max_epochs=2, callbacks=[WeightAveraging()], enable_checkpointing=True)
    run.fit(model, data())
    assert len(model.seen) == 8
    for i, p in enumerate(model.parameters()):
        assert torch.allclose(p, torch.stack([s[i] for s in model.seen]).mean(0), atol=1e-6)
    saved = torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=False)
    assert int(saved["averaging_state"]["n_averaged"]) == 8
    assert torch.allclose(saved["state_dict"]["net.0.weight"], model.net[0].weight)
    assert torch.equal(saved["current_model_state"]["net.0.weight"], model.seen[-1][0])


def test_ema_updates_from_the_step_asked_with_its_decay(tmp_path: Path) -> None:
    model = Recorder()
    ema = EMAWeightAveraging(decay=0.5, update_every_n_steps=2, update_starting_at_step=3)
    quiet(tmp_path, max_steps=8, callbacks=[ema]).fit(model, data())
    # steps (0-based) 4 and 6 are averaged: the first sets the average, the second blends it half and half
    expected = [0.5 * a + 0.5 * b for a, b in zip(model.seen[4], model.seen[6])]
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p, e, atol=1e-6)
    with pytest.raises(ValueError, match=r"decay=1\.5"):
        EMAWeightAveraging(decay=1.5)


# ---- RichModelSummary ---------------------------------------------------------------------------------------
def test_rich_summary_prints_the_layer_table_and_comes_with_the_rich_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("rich")
    from trainer.callbacks import RichModelSummary, RichProgressBar

    run = quiet(tmp_path, max_steps=1, callbacks=[RichModelSummary(max_depth=2, header_style="bold")])
    run.fit(Regressor(), data())
    out = capsys.readouterr().out
    assert "net.0" in out and "Linear" in out and "Total params" in out and "Total FLOPs" in out
    summaries = quiet(tmp_path, callbacks=[RichProgressBar()], enable_progress_bar=True, enable_model_summary=True)
    assert [type(cb).__name__ for cb in summaries.callbacks if "Summary" in type(cb).__name__] == ["RichModelSummary"]


# ---- ThroughputMonitor --------------------------------------------------------------------------------------
class Rows(Logger):
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))


def test_throughput_monitor_logs_rates_once_its_window_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.callbacks import ThroughputMonitor, throughput_monitor
    from trainer.utilities import measure_flops

    clock = iter([0.0, 1.5, 2.5, 3.5, 4.5, 5.5])  # one second per step after a first step of 1.5 s
    monkeypatch.setattr(throughput_monitor, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    model = Regressor()
    model.flops_per_batch = 10
    monitor = ThroughputMonitor(
        batch_size_fn=lambda b: 3, length_fn=lambda b: 6, window_size=4, separator="|", available_flops=100
    )
    rows = Rows()
    quiet(tmp_path, max_steps=5, log_every_n_steps=1, logger=rows, callbacks=[monitor]).fit(model, data(40))
    mine = [(step, row) for step, row in rows.rows if "train|time" in row]
    assert [step for step, _ in mine] == [0, 1, 2, 3, 4]
    assert [row["train|samples"] for _, row in mine] == [3, 6, 9, 12, 15]
    assert "train|device|samples_per_sec" not in mine[2][1]
    assert mine[4][1] == {
        "train|time": 5.5,
        "train|batches": 5,
        "train|samples": 15,
        "train|lengths": 30,
        "train|device|batches_per_sec": 1.0,
        "train|device|samples_per_sec": 3.0,
        "train|device|items_per_sec": 6.0,
        "train|device|flops_per_sec": 10.0,
        "train|device|mfu": 0.1,
        "epoch": 0,
    }
    # a Linear(8, 16) forward on 4 rows: 2 * 4 * 8 * 16 multiply-adds
    layer = torch.nn.Linear(8, 16)
    assert measure_flops(layer, lambda: layer(torch.randn(4, 8))) == 1024
    with pytest.raises(ValueError, match="window_size=1"):
        ThroughputMonitor(batch_size_fn=len, window_size=1)


# ---- SpikeDetection -----------------------------------------------------------------------------------------
class Spiking(Regressor):
    """A falling loss with a jump at batch 4 (``spike`` times the loss)."""

    def __init__(self, spike: float) -> None:
        super().__init__()
        self.spike = spike

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        scale = self.spike if batch_idx == 4 else 1.0 / (batch_idx + 1)
        return self.net[0].weight.sum() * 0 + scale  # the loss value is chosen; the graph still reaches the weights


def test_spike_detection_stops_at_the_spike_and_names_the_batches_to_skip(tmp_path: Path) -> None:
    from trainer.callbacks import SpikeDetection, TrainingSpikeException

    path = tmp_path / "skip.json"
    with pytest.raises(TrainingSpikeException, match="batch 4"):
        quiet(tmp_path, max_epochs=1, callbacks=[SpikeDetection(exclude_batches_path=path)]).fit(Spiking(5.0), data(64))
    assert json.loads(path.read_text()) == [3, 4]
    # a loss that keeps falling is no spike; atol above the jump lets it pass too
    quiet(tmp_path, max_epochs=1, callbacks=[SpikeDetection(exclude_batches_path=path)]).fit(Spiking(0.1), data(64))
    quiet(tmp_path, max_epochs=1, callbacks=[SpikeDetection(atol=10.0)]).fit(Spiking(5.0), data(64))
    with pytest.raises(ValueError, match="min or max"):
        SpikeDetection(mode="lowest")  # type: ignore[arg-type]
