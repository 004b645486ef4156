"""LearningRateMonitor and ModelSummary on tiny CPU runs (Timer, LambdaCallback, BasePredictionWriter:
test_more_callbacks_hooks.py; fine-tuning and SWA: test_more_callbacks_training.py)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import trainer
from tests.models import Regressor, assert_bitwise_equal, loader, quiet, regression_data
from trainer.callbacks import LearningRateMonitor, ModelSummary
from trainer.callbacks.model_summary import human_count, summarize
from trainer.loggers.base import Logger
from trainer.optim import SchedulerConfig


def data(n: int = 32, batch_size: int = 8, shuffle: bool = False) -> torch.utils.data.DataLoader:
    return loader(regression_data(n), batch_size=batch_size, shuffle=shuffle)


class Memory(Logger):
    """Keeps every ``log_metrics`` call."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def values(self, name: str) -> list[tuple[int, float]]:
        return [(step, row[name]) for step, row in self.rows if name in row]


# ---- LearningRateMonitor ------------------------------------------------------------------------
class Scheduled(Regressor):
    """SGD whose rate halves at every step (or epoch) boundary."""

    def __init__(self, interval: str = "step", groups: int = 1, name: str | None = None) -> None:
        super().__init__(lr=0.1)
        self.interval, self.groups, self.name = interval, groups, name

    def configure_optimizers(self) -> Any:
        params = list(self.parameters())
        groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.2}] if self.groups == 2 else params
        opt = torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5**i)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval, "name": self.name}}


def monitored(tmp_path: Path, module: trainer.Module, monitor: LearningRateMonitor, **kwargs: Any) -> Memory:
    memory = Memory()
    quiet(tmp_path, logger=memory, callbacks=[monitor], **kwargs).fit(module, data())
    return memory


def test_each_logged_rate_is_the_one_its_step_used(tmp_path: Path) -> None:
    """Step schedulers at logging steps, named ``lr-SGD``, at the step number whose update used it."""
    monitor = LearningRateMonitor()
    memory = monitored(tmp_path, Scheduled("step"), monitor, max_epochs=2, log_every_n_steps=3)
    assert memory.values("lr-SGD") == [(2, pytest.approx(0.1 * 0.5**2)), (5, pytest.approx(0.1 * 0.5**5))]
    assert monitor.lrs == {"lr-SGD": [pytest.approx(0.025), pytest.approx(0.1 * 0.5**5)]}
    assert [step for step, _ in memory.values("train_loss")] == [2, 5]  # the same step numbers as the step's metrics


def test_epoch_schedulers_are_logged_at_each_epoch_start(tmp_path: Path) -> None:
    memory = monitored(tmp_path, Scheduled("epoch"), LearningRateMonitor(), max_epochs=3, log_every_n_steps=1)
    assert memory.values("lr-SGD") == [(0, 0.1), (4, 0.05), (8, 0.025)]  # Lightning's steps


@pytest.mark.parametrize(("interval", "expected"), [("epoch", [0, 4]), ("step", [1, 3, 5, 7])])
def test_logging_interval_puts_every_scheduler_on_one_clock(tmp_path: Path, interval: str, expected: list[int]) -> None:
    memory = monitored(tmp_path, Scheduled("step"), LearningRateMonitor(interval), max_epochs=2, log_every_n_steps=2)
    assert [step for step, _ in memory.values("lr-SGD")] == expected


def test_groups_momentum_and_weight_decay_and_callback_metrics(tmp_path: Path) -> None:
    monitor = LearningRateMonitor(log_momentum=True, log_weight_decay=True, log_key_prefix="optim/")
    fit = quiet(tmp_path, logger=Memory(), callbacks=[monitor], max_epochs=1)
    fit.fit(Scheduled("epoch", groups=2, name="my-lr"), data())
    row = fit.logger.rows[0][1]  # type: ignore[union-attr]
    assert row == {
        "optim/my-lr/pg1": 0.1,
        "optim/my-lr/pg1-momentum": 0.9,
        "optim/my-lr/pg1-weight_decay": 0.01,
        "optim/my-lr/pg2": 0.2,
        "optim/my-lr/pg2-momentum": 0.9,
        "optim/my-lr/pg2-weight_decay": 0.01,
    }
    assert float(fit.callback_metrics["optim/my-lr/pg2"]) == pytest.approx(0.2)


def fake_trainer(optimizers: list[torch.optim.Optimizer], configs: Sequence[SchedulerConfig] = ()) -> Any:
    return types.SimpleNamespace(optimizers=optimizers, lr_scheduler_configs=list(configs))


def test_names_follow_lightnings_rules() -> None:
    p = [nn.Parameter(torch.zeros(1)) for _ in range(5)]
    adam_a, adam_b = torch.optim.Adam([p[0]]), torch.optim.Adam([p[1]])
    named_groups = torch.optim.SGD([{"params": [p[2]], "name": "head"}, {"params": [p[3]]}], lr=0.1)
    single_named = torch.optim.SGD([{"params": [p[4]], "name": "body"}], lr=0.1)
    sched = SchedulerConfig(torch.optim.lr_scheduler.StepLR(adam_b, 1), name="custom")
    everything = fake_trainer([adam_a, adam_b, named_groups, single_named], [sched])
    names = [n.names for n in LearningRateMonitor()._named(everything)]
    assert names == [["custom"], ["lr-Adam"], ["lr-SGD/head", "lr-SGD/pg2"], ["lr-SGD-1/body"]]
    assert [n.names for n in LearningRateMonitor()._named(fake_trainer([adam_a, adam_b]))] == [
        ["lr-Adam"],
        ["lr-Adam-1"],
    ]


def test_duplicate_group_names_are_refused() -> None:
    p = [nn.Parameter(torch.zeros(1)) for _ in range(2)]
    opt = torch.optim.SGD([{"params": [p[0]], "name": "x"}, {"params": [p[1]], "name": "x"}], lr=0.1)
    with pytest.raises(ValueError, match=r"duplicated parameter group names \['x'\]"):
        LearningRateMonitor()._named(fake_trainer([opt]))


def test_monitor_needs_a_logger_and_a_known_interval(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="logging_interval='batch'"):
        LearningRateMonitor("batch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a logger"):
        quiet(tmp_path, max_epochs=1, callbacks=[LearningRateMonitor()]).fit(Regressor(), data())


def test_momentum_of_an_optimizer_without_one_is_logged_as_zero_with_a_warning(tmp_path: Path) -> None:
    class Rprop(Regressor):
        def configure_optimizers(self) -> Any:
            return torch.optim.Rprop(self.parameters(), lr=0.01)

    with pytest.warns(RuntimeWarning, match="do not have momentum"):
        memory = monitored(tmp_path, Rprop(), LearningRateMonitor(log_momentum=True), max_epochs=1)
    assert memory.values("lr-Rprop-momentum") == [(0, 0.0)]


# ---- ModelSummary -------------------------------------------------------------------------------
class Net(trainer.Module):
    def __init__(self, example: bool = True) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU())
        self.head = nn.Linear(32, 2)
        self.scale = nn.Parameter(torch.ones(1))  # owned by the root: an "other params" row
        if example:
            self.example_input_array = torch.zeros(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)) * self.scale

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self(batch[0]).sum(1, keepdim=True), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_human_count_abbreviates_as_lightning_does() -> None:
    cases = {0: "0  ", 123: "123  ", 1234: "1.2 K", 2e6: "2.0 M", 3e9: "3.0 B", 4e14: "400 T", 5e15: "5,000 T"}
    assert {n: human_count(n) for n in cases} == cases


def test_summary_rows_totals_and_shapes() -> None:
    net = Net()
    net.head.requires_grad_(False)
    net.encoder[2].eval()
    summary = summarize(net, max_depth=1)
    assert [(r.name, r.type, r.params) for r in summary.rows] == [
        ("encoder", "Sequential", 352),
        ("head", "Linear", 66),
    ]
    assert (summary.total_params, summary.trainable_params, summary.other_params) == (419, 353, 1)
    assert summary.size_mb == pytest.approx(419 * 4e-6)
    assert summary.modes == {"train": 4, "eval": 1}
    assert [(r.in_size, r.out_size) for r in summary.rows] == [([4, 8], [4, 32]), ([4, 32], [4, 2])]
    assert summary.rows[0].flops == 2 * 4 * 8 * 32 and summary.total_flops == 2 * 4 * 8 * 32 + 2 * 4 * 32 * 2  # matmuls
    assert net.training and not net.encoder[2].training  # each submodule's mode is put back
    assert not any(m._forward_hooks for m in net.modules())  # and the shape hooks are gone
    table = str(summary).splitlines()
    assert table[0] == "  | Name         | Type       | Params | Mode  | FLOPs | In sizes | Out sizes"
    assert table[2] == "0 | encoder      | Sequential | 352    | train | 2.0 K | [4, 8]   | [4, 32]"
    assert table[4] == "  | other params | n/a        | 1      | n/a   | n/a   | n/a      | n/a"
    assert table[-7:] == [
        "353       Trainable params",
        "66        Non-trainable params",
        "419       Total params",
        "0.002     Total estimated model params size (MB)",
        "4         Modules in train mode",
        "1         Modules in eval mode",
        "2.6 K     Total Flops",
    ]


@pytest.mark.parametrize(("depth", "names"), [(0, []), (2, ["encoder", "encoder.0", "encoder.1", "encoder.2", "head"])])
def test_summary_depth(depth: int, names: list[str]) -> None:
    summary = summarize(Net(example=False), max_depth=depth)
    assert [r.name for r in summary.rows] == names and not summary.shapes
    assert "In sizes" not in str(summary)


def test_summary_is_printed_once_at_fit_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet(tmp_path, max_epochs=2, callbacks=[ModelSummary(max_depth=-1)]).fit(Net(), data())
    out = capsys.readouterr().out
    assert out.count("Total params") == 1 and "encoder.1    | BatchNorm1d" in out and "[4, 8]" in out
    quiet(tmp_path, max_epochs=1, callbacks=[ModelSummary(max_depth=0)]).fit(Net(), data())
    assert "Total params" not in capsys.readouterr().out
    with pytest.raises(ValueError, match="max_depth=-2"):
        ModelSummary(max_depth=-2)


def test_the_default_summary_leaves_the_random_streams_alone(tmp_path: Path) -> None:
    """The summary's example forward runs on rank zero only: it must not move any random stream."""

    class Noisy(Regressor):
        def __init__(self) -> None:
            super().__init__(dropout=0.5)  # training draws from the stream the summary could move
            self.example_input_array = torch.zeros(2, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x + 0.1 * torch.randn_like(x))

    def run(summary: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        module = Noisy()
        data = loader(regression_data(n=16), batch_size=4)
        quiet(tmp_path / str(summary), max_epochs=1, enable_model_summary=summary).fit(module, data)
        return [p.detach().clone() for p in module.parameters()]

    assert_bitwise_equal(run(True), run(False))
