"""The progress bars: what a log file and a terminal show, and that drawing never waits for the device."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ProgressBar, TQDMProgressBar
from trainer.callbacks.progress.host_values import HostValues


class Logged(Regressor):
    """Logs ``train_loss`` and ``val_loss`` to the bar, as a Lightning user does."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)  # logged once: a name logged twice is refused
        self.log("train_loss", loss, prog_bar=True)
        self.log("hidden", 1.0)  # not prog_bar: never shown
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val_loss", 0.5, prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", 0.5)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])


def batches(n: int) -> Any:
    return loader(regression_data(n=4 * n), batch_size=4)


def fit_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str], bar: ProgressBar, **kwargs: Any) -> list[str]:
    run = quiet(tmp_path, callbacks=[bar], enable_progress_bar=True, **{"max_epochs": 2, **kwargs})
    run.fit(Logged(), batches(25), batches(3))
    return capsys.readouterr().out.splitlines()


# ---- a log file (stdout is not a terminal) ----------------------------------------------------------------
def test_every_epoch_ends_at_100_percent_in_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = fit_lines(tmp_path, capsys, TQDMProgressBar(refresh_rate=10, line_interval_s=0))
    epochs = [ln.split(" [")[0] for ln in lines if ln.startswith("Epoch ")]
    assert epochs == [
        "Epoch 0:  40% 10/25", "Epoch 0:  80% 20/25", "Epoch 0: 100% 25/25",
        "Epoch 0: 100% 25/25",  # again once validation added val_loss
        "Epoch 1:  40% 10/25", "Epoch 1:  80% 20/25", "Epoch 1: 100% 25/25",
    ]  # fmt: skip
    shown = [ln for ln in lines if ln.startswith("Epoch ")]
    assert all(re.search(r"it/s, train_loss=[\d.]+(, val_loss=0.500)?\]$", ln) for ln in shown), shown
    assert not any("loss=" in ln.replace("train_loss=", "").replace("val_loss=", "") for ln in shown)
    assert not any("hidden" in ln for ln in lines)
    assert [ln.split(" [")[0] for ln in lines if "DataLoader" in ln] == ["Validation DataLoader 0: 100% 3/3"] * 2


def test_a_log_gets_a_line_per_interval_and_each_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = fit_lines(tmp_path, capsys, TQDMProgressBar(), num_sanity_val_steps=2)  # 10 s between lines
    assert [ln.split(" [")[0] for ln in lines] == [
        "Sanity Checking DataLoader 0: 100% 2/2",
        "Validation DataLoader 0: 100% 3/3",
        "Epoch 0: 100% 25/25",
        "Validation DataLoader 0: 100% 3/3",
        "Epoch 1: 100% 25/25",
    ]


def test_v_num_is_the_loggers_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = fit_lines(tmp_path, capsys, TQDMProgressBar(), max_epochs=1, logger=True)
    assert re.search(r"Epoch 0: 100% 25/25 \[.*it/s, v_num=0, train_loss=\S+, val_loss=0.500\]$", lines[-1])


def test_validate_test_and_predict_have_their_bars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = quiet(tmp_path, callbacks=[TQDMProgressBar()], enable_progress_bar=True)
    run.validate(Logged(), [batches(3), batches(2)], verbose=False)
    run.test(Logged(), batches(4), verbose=False)
    run.predict(Logged(), batches(5))
    assert [ln.split(" [")[0] for ln in capsys.readouterr().out.splitlines()] == [
        "Validation DataLoader 0: 100% 3/3",
        "Validation DataLoader 1: 100% 2/2",
        "Testing DataLoader 0: 100% 4/4",
        "Predicting DataLoader 0: 100% 5/5",
    ]


def test_a_stopped_epoch_ends_where_it_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = fit_lines(tmp_path, capsys, TQDMProgressBar(), max_epochs=1, max_steps=7)
    assert [ln.split(" [")[0] for ln in lines if ln.startswith("Epoch")] == ["Epoch 0:  28% 7/25"]


# ---- a terminal ------------------------------------------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_tqdm_bars_that_end_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    bar = TQDMProgressBar(refresh_rate=10)
    quiet(tmp_path, max_epochs=2, callbacks=[bar], enable_progress_bar=True).fit(Logged(), batches(25), batches(3))
    frames = screen.getvalue().split("\r")
    epoch_frames = [f for f in frames if f.startswith("Epoch 1:")]
    full = r"Epoch 1: 100%\|[█#]+\| 25/25 \[.*train_loss=\S+, val_loss=0.500\]"
    assert epoch_frames and re.match(full, epoch_frames[-1])
    assert any(f.startswith("Validation DataLoader 0: 100%|") and "3/3" in f for f in frames)


def test_rich_bar_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.callbacks import RichProgressBar

    monkeypatch.setattr(sys, "stdout", Terminal())
    screen = io.StringIO()
    bar = RichProgressBar(leave=True, console_kwargs={"file": screen, "force_terminal": True, "width": 140})
    quiet(tmp_path, max_epochs=2, callbacks=[bar], enable_progress_bar=True).fit(Logged(), batches(25), batches(3))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert re.search(r"Epoch 1/1 .*25/25 .*train_loss: \S+ val_loss: 0\.500", text), text[-2000:]
    assert (bar.val_progress_bar.completed, bar.val_progress_bar.total) == (3, 3)
    assert not bar.val_progress_bar.visible  # hidden when validation ends; the training bar goes on


def test_rich_bar_in_a_log_prints_each_bar_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainer.callbacks import RichProgressBar

    lines = fit_lines(tmp_path, capsys, RichProgressBar(), max_epochs=1)
    assert len([ln for ln in lines if ln.startswith("Epoch 0/0")]) == 1, lines  # rich: the last frame, no redraws
    assert re.search(r"Epoch 0/0 .*25/25", "\n".join(lines))


def test_rich_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.callbacks import RichProgressBar

    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ImportError, match=r"pip install rich.*'\.\[rich\]'"):
        RichProgressBar()


# ---- the Trainer's choice of bar ------------------------------------------------------------------------
def test_the_default_bar_and_a_users_bar(tmp_path: Path) -> None:
    assert type(quiet(tmp_path, enable_progress_bar=True).progress_bar_callback) is TQDMProgressBar
    assert quiet(tmp_path, enable_progress_bar=False).progress_bar_callback is None

    class Percent(ProgressBar):  # Lightning's docs example of a custom bar
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[float] = []

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            self.seen.append(100 * (batch_idx + 1) / self.total_train_batches)

    mine = Percent()
    run = quiet(tmp_path, max_epochs=1, callbacks=[mine], enable_progress_bar=True)
    assert run.progress_bar_callback is mine and sum(isinstance(cb, ProgressBar) for cb in run.callbacks) == 1
    run.fit(Logged(), batches(4))
    assert mine.seen == [25.0, 50.0, 75.0, 100.0]


def test_contradicting_bar_flags_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"enable_progress_bar=False contradicts the TQDMProgressBar in callbacks="):
        quiet(tmp_path, callbacks=[TQDMProgressBar()], enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"2 progress bars \(TQDMProgressBar, TQDMProgressBar\); keep one"):
        quiet(tmp_path, callbacks=[TQDMProgressBar(), TQDMProgressBar()], enable_progress_bar=True)
    with pytest.raises(ValueError, match=r"refresh_rate=-1\) must be an int >= 0"):
        TQDMProgressBar(refresh_rate=-1)


def test_refresh_rate_zero_draws_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fit_lines(tmp_path, capsys, TQDMProgressBar(refresh_rate=0, line_interval_s=0)) == []


# ---- reading values without waiting for the device --------------------------------------------------------
class FakeEvent:
    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


def test_host_values_show_the_newest_completed_copy() -> None:
    events: list[FakeEvent] = []

    def make_event(device: torch.device) -> FakeEvent:
        events.append(FakeEvent())
        return events[-1]

    host = HostValues(make_event)
    cuda_like = torch.device("cuda", 0)
    first, second = torch.tensor(1.0), torch.tensor(2.0)
    monkey = pytest.MonkeyPatch()
    # CPU tensors pretending to be on CUDA: the copy path and the events are what is tested here
    monkey.setattr(torch.Tensor, "device", property(lambda t: cuda_like))
    try:
        assert host.refresh({"a": first}) == {}  # the copy is in flight: nothing to show yet, and no wait
        assert host.refresh({"a": second}) == {}
        events[1].done = True  # the newer copy landed, so the older one has too (stream order)
        assert host.refresh({"a": second}) == {"a": 2.0}
    finally:
        monkey.undo()
    assert host.refresh({"b": torch.tensor(3.0), "c": 4}) == {"b": 3.0, "c": 4.0}  # the CPU: read at once


@pytest.mark.cuda
def test_host_values_never_synchronize_on_cuda() -> None:
    host = HostValues()
    value = torch.zeros((), device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # any blocking read or copy raises
    try:
        for _ in range(1, 200):
            value = value + 1  # the step's work, queued
            shown = host.refresh({"loss": value})
            assert set(shown) <= {"loss"}
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert host.refresh({"loss": value})["loss"] >= 198.0  # every copy before the last has landed by now
