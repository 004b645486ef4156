"""Callback hooks (order and counts), ModelCheckpoint, EarlyStopping and the plain-text ProgressBar."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data


def data(n: int = 16, batch_size: int = 4) -> torch.utils.data.DataLoader:
    return loader(regression_data(n), batch_size=batch_size)


# ---- hook order -----------------------------------------------------------------------------
class Recorder(trainer.Callback):
    """Records every hook with the arguments that identify the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def setup(self, trainer: trainer.Trainer, module: trainer.Module, stage: str) -> None:
        self.calls.append(("setup", stage))

    def teardown(self, trainer: trainer.Trainer, module: trainer.Module, stage: str) -> None:
        self.calls.append(("teardown", stage))

    def on_fit_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.calls.append(("on_fit_start",))

    def on_fit_end(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.calls.append(("on_fit_end",))

    def on_train_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.calls.append(("on_train_epoch_start", trainer.current_epoch))

    def on_train_epoch_end(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.calls.append(("on_train_epoch_end", trainer.current_epoch))

    def on_train_batch_start(
        self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, batch_idx: int
    ) -> None:
        assert module.training
        self.calls.append(("on_train_batch_start", batch_idx))

    def on_train_batch_end(
        self, trainer: trainer.Trainer, module: trainer.Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        assert isinstance(outputs, dict) and outputs["loss"].dim() == 0  # Lightning's {"loss": ...}
        self.calls.append(("on_train_batch_end", batch_idx))

    def on_before_optimizer_step(self, trainer: trainer.Trainer, module: trainer.Module, optimizer: Any) -> None:
        assert all(p.grad is not None for p in module.parameters())
        self.calls.append(("on_before_optimizer_step", trainer.global_step))

    def on_validation_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        assert not module.training
        self.calls.append(("on_validation_epoch_start",))

    def on_validation_batch_end(
        self, trainer: trainer.Trainer, module: trainer.Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.calls.append(("on_validation_batch_end", batch_idx))

    def on_validation_epoch_end(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.calls.append(("on_validation_epoch_end",))

    def on_exception(self, trainer: trainer.Trainer, module: trainer.Module, exception: BaseException) -> None:
        self.calls.append(("on_exception", type(exception).__name__))


def expected_fit(epochs: int, batches: int, val_batches: int, accumulate: int = 1) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = [("setup", "fit"), ("on_fit_start",)]
    step = 0
    for epoch in range(epochs):
        calls.append(("on_train_epoch_start", epoch))
        for b in range(batches):
            calls.append(("on_train_batch_start", b))
            if (b + 1) % accumulate == 0 or b + 1 == batches:
                calls.append(("on_before_optimizer_step", step))
                step += 1
            calls.append(("on_train_batch_end", b))
        calls.append(("on_validation_epoch_start",))
        calls += [("on_validation_batch_end", b) for b in range(val_batches)]
        calls.append(("on_validation_epoch_end",))
        calls.append(("on_train_epoch_end", epoch))
    return [*calls, ("on_fit_end",), ("teardown", "fit")]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_hook_order_and_counts(tmp_path: Path, accumulate: int) -> None:
    rec = Recorder()
    fit = quiet(tmp_path, max_epochs=2, callbacks=[rec], accumulate_grad_batches=accumulate)
    fit.fit(Regressor(), data(16), data(8))
    assert rec.calls == expected_fit(2, 4, 2, accumulate)
    steps = sum(1 for c in rec.calls if c[0] == "on_before_optimizer_step")
    assert steps == 8 // accumulate == fit.global_step


def test_sanity_check_runs_validation_hooks_before_the_first_epoch(tmp_path: Path) -> None:
    rec = Recorder()
    quiet(tmp_path, max_epochs=1, callbacks=[rec], num_sanity_val_steps=1).fit(Regressor(), data(16), data(8))
    start = rec.calls.index(("on_fit_start",))
    assert rec.calls[start + 1 : start + 5] == [
        ("on_validation_epoch_start",),
        ("on_validation_batch_end", 0),
        ("on_validation_epoch_end",),
        ("on_train_epoch_start", 0),
    ]


def test_validate_and_exception_hooks(tmp_path: Path) -> None:
    rec = Recorder()
    quiet(tmp_path, callbacks=[rec]).validate(Regressor(), data(8))
    assert rec.calls == [
        ("setup", "validate"),
        ("on_validation_epoch_start",),
        ("on_validation_batch_end", 0),
        ("on_validation_batch_end", 1),
        ("on_validation_epoch_end",),
        ("teardown", "validate"),
    ]

    class Boom(Regressor):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            raise RuntimeError("boom")

    rec = Recorder()
    with pytest.raises(RuntimeError, match="boom"):
        quiet(tmp_path, max_epochs=1, callbacks=[rec]).fit(Boom(), data(8))
    assert rec.calls[-2:] == [("on_exception", "RuntimeError"), ("teardown", "fit")]


def test_callback_hooks_run_before_module_hooks_as_in_lightning(tmp_path: Path) -> None:
    order: list[str] = []

    class Hooked(Regressor):
        def on_train_epoch_start(self) -> None:
            order.append("module")

    class Cb(trainer.Callback):
        def on_train_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
            order.append("callback")

    quiet(tmp_path, max_epochs=2, callbacks=[Cb()]).fit(Hooked(), data(8))
    assert order == ["callback", "module"] * 2


def test_per_batch_callback_hooks_run_before_the_module_with_their_arguments(tmp_path: Path) -> None:
    order: list[tuple[str, ...]] = []

    class Hooked(Regressor):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            order.append(("module start", str(batch_idx), str(len(batch[0]))))

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            order.append(("module end", str(batch_idx), str(outputs["loss"].requires_grad)))

    class Cb(trainer.Callback):
        def on_train_batch_start(self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, idx: int) -> None:
            order.append(("callback start", str(idx)))

    module = Hooked()
    # A hook set on the instance counts as overridden too.
    module.on_before_optimizer_step = lambda optimizer: order.append(("instance", type(optimizer).__name__))  # type: ignore[method-assign]
    quiet(tmp_path, max_epochs=1, callbacks=[Cb()]).fit(module, data(8))  # batches of 4: two steps
    per_batch = [
        [("callback start", i), ("module start", i, "4"), ("instance", "SGD"), ("module end", i, "False")]
        for i in ("0", "1")
    ]
    assert order == per_batch[0] + per_batch[1]


# ---- ModelCheckpoint ------------------------------------------------------------------------------
class Scored(Regressor):
    """Logs ``score`` = ``scores[epoch]`` in validation, so a test decides what is best."""

    def __init__(self, scores: list[float] | None = None) -> None:
        super().__init__()
        self.scores = scores or [0.0]

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("score", self.scores[self.current_epoch])


def ckpt_names(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.ckpt")}


@pytest.mark.parametrize(("mode", "best", "second"), [("min", 3, 1), ("max", 2, 4)])
def test_top_k_keeps_the_best_two_and_deletes_the_rest(tmp_path: Path, mode: str, best: int, second: int) -> None:
    scores = [0.5, 0.2, 0.9, 0.1, 0.7]
    folder = tmp_path / "ckpts"
    cb = trainer.ModelCheckpoint(dirpath=folder, monitor="score", mode=mode, save_top_k=2, save_last=True)
    fit = quiet(tmp_path, max_epochs=5, callbacks=[cb], enable_checkpointing=True)
    fit.fit(Scored(scores), data(8), data(8))
    steps = {e: 2 * (e + 1) for e in range(5)}
    kept = {f"epoch={e}-step={steps[e]}.ckpt" for e in (best, second)}
    assert ckpt_names(folder) == kept | {"last.ckpt"}
    assert cb.best_model_path == str(folder / f"epoch={best}-step={steps[best]}.ckpt")
    assert float(cb.best_model_score) == pytest.approx(scores[best])
    assert set(cb.best_k_models) == {str(folder / name) for name in kept}
    for name in kept:  # each kept file records a top-k that never names a deleted file
        state = torch.load(folder / name, weights_only=True)["callbacks"][cb.state_key]
        assert len(state["best_k_models"]) <= 2
        assert str(folder / name) in state["best_k_models"]
    last = torch.load(folder / "last.ckpt", weights_only=True)
    assert last["global_step"] == 10
    assert set(last["callbacks"][cb.state_key]["best_k_models"]) == set(cb.best_k_models)


def test_save_last_only(tmp_path: Path) -> None:
    cb = trainer.ModelCheckpoint(save_top_k=0, save_last=True)
    fit = quiet(tmp_path, max_epochs=2, callbacks=[cb], enable_checkpointing=True)
    module = Regressor()
    fit.fit(module, data(8))
    folder = tmp_path / "checkpoints"  # logger=False: <default_root_dir>/checkpoints
    assert ckpt_names(folder) == {"last.ckpt"}
    assert cb.last_model_path == str(folder / "last.ckpt")
    last = torch.load(folder / "last.ckpt", weights_only=True)
    assert last["global_step"] == 4 and last["epoch"] == 1
    for name, value in module.state_dict().items():
        assert torch.equal(last["state_dict"][name], value)


@pytest.mark.parametrize(
    ("accumulate", "every", "expected"),
    [
        (1, 3, {"epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"}),
        # With accumulation a step ends only every second batch: no file for step 0 or twice per step.
        (2, 1, {"epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "epoch=1-step=3.ckpt", "epoch=1-step=4.ckpt"}),
    ],
)
def test_every_n_train_steps(tmp_path: Path, accumulate: int, every: int, expected: set[str]) -> None:
    folder = tmp_path / "ckpts"
    cb = trainer.ModelCheckpoint(
        dirpath=folder, every_n_train_steps=every, every_n_epochs=None, save_top_k=-1, save_last=False
    )
    fit = quiet(tmp_path, max_epochs=2, callbacks=[cb], enable_checkpointing=True, accumulate_grad_batches=accumulate)
    fit.fit(Regressor(), data(16))
    assert ckpt_names(folder) == expected
    for name in expected:
        step = int(re.search(r"step=(\d+)", name)[1])  # type: ignore[index]
        ckpt = torch.load(folder / name, weights_only=True)
        assert ckpt["global_step"] == step
        assert ckpt["loops"]["fit"]["batches_done"] % accumulate == 0  # saved at a step boundary


def test_filename_with_a_metric_format(tmp_path: Path) -> None:
    folder = tmp_path / "ckpts"
    cb = trainer.ModelCheckpoint(
        dirpath=folder,
        filename="{epoch}-{score:.2f}",
        monitor="score",
        mode="max",
        save_top_k=-1,
        save_last=False,
    )
    quiet(tmp_path, max_epochs=3, callbacks=[cb], enable_checkpointing=True).fit(
        Scored([0.5, 0.25, 0.125]), data(8), data(8)
    )
    # Lightning's auto_insert_metric_name: {epoch} becomes epoch=<value>
    assert ckpt_names(folder) == {"epoch=0-score=0.50.ckpt", "epoch=1-score=0.25.ckpt", "epoch=2-score=0.12.ckpt"}
    assert cb.best_model_path == str(folder / "epoch=0-score=0.50.ckpt")


def test_missing_monitor_names_the_logged_keys(tmp_path: Path) -> None:
    cb = trainer.ModelCheckpoint(monitor="val_acc")
    fit = quiet(tmp_path, max_epochs=1, callbacks=[cb], enable_checkpointing=True)
    with pytest.raises(KeyError) as exc:
        fit.fit(Scored(), data(8), data(8))
    message = exc.value.args[0]
    assert "monitor='val_acc'" in message
    assert "logged: ['score', 'train_loss']" in message
    assert "self.log('val_acc', ...)" in message


def test_missing_filename_metric_is_named(tmp_path: Path) -> None:
    cb = trainer.ModelCheckpoint(filename="{epoch}-{val_acc:.2f}")
    fit = quiet(tmp_path, max_epochs=1, callbacks=[cb], enable_checkpointing=True)
    with pytest.raises(KeyError, match=r"uses \['val_acc'\], which were not logged"):
        fit.fit(Scored(), data(8), data(8))


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(mode="best"), r"mode='best'\): `mode` can be 'min' or 'max'"),
        (dict(save_top_k=-2), r"save_top_k=-2\) must be -1 \(all\), 0 or more"),
        (dict(every_n_train_steps=-1), r"every_n_train_steps=-1\) must be >= 0 or None"),
    ],
)
def test_model_checkpoint_bad_arguments(kwargs: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        trainer.ModelCheckpoint(**kwargs)


# ---- EarlyStopping --------------------------------------------------------------------------------
class EpochCounter(trainer.Callback):
    def __init__(self) -> None:
        self.epochs = 0

    def on_train_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.epochs += 1


def test_early_stopping_stops_after_patience(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores = [5.0, 4.0, 4.5, 4.2, 3.0, 2.0, 1.0, 0.5]  # no improvement at epochs 2 and 3
    es = trainer.EarlyStopping(monitor="score", mode="min", patience=2)
    counter = EpochCounter()
    fit = quiet(tmp_path, max_epochs=8, callbacks=[es, counter])
    fit.fit(Scored(scores), data(8), data(8))
    assert counter.epochs == 4
    assert es.stopped_epoch == 3
    assert fit.current_epoch == 4 and fit.global_step == 8
    assert es.best_score == 4.0 and es.wait_count == 2
    assert "early stopping at epoch 3" in capsys.readouterr().out


def test_early_stopping_min_delta_and_max_mode(tmp_path: Path) -> None:
    scores = [1.0, 1.05, 1.5, 1.55, 1.58, 3.0]  # +0.05 steps are below min_delta=0.1
    es = trainer.EarlyStopping(monitor="score", mode="max", patience=2, min_delta=0.1)
    fit = quiet(tmp_path, max_epochs=6, callbacks=[es])
    fit.fit(Scored(scores), data(8), data(8))
    assert es.stopped_epoch == 4 and es.best_score == 1.5


def test_early_stopping_waits_for_validation(tmp_path: Path) -> None:
    """With validation every 2nd epoch, only epochs that validated count towards patience."""
    scores = [9.0, 5.0, 9.0, 4.0, 9.0, 3.0, 9.0, 2.0]  # validated at odd epochs: always improving there
    es = trainer.EarlyStopping(monitor="score", mode="min", patience=1)
    fit = quiet(tmp_path, max_epochs=8, callbacks=[es], check_val_every_n_epoch=2)
    fit.fit(Scored(scores), data(8), data(8))
    assert es.stopped_epoch == 0 and fit.current_epoch == 8  # Lightning's 0: never stopped
    assert es.best_score == 2.0


def test_early_stopping_non_finite_stops(tmp_path: Path) -> None:
    es = trainer.EarlyStopping(monitor="score", patience=5)
    fit = quiet(tmp_path, max_epochs=5, callbacks=[es])
    fit.fit(Scored([1.0, float("nan"), 0.5, 0.4, 0.3]), data(8), data(8))
    assert es.stopped_epoch == 1 and "not finite" in es.reason


def test_early_stopping_state_round_trips(tmp_path: Path) -> None:
    scores = [5.0, 4.0, 4.5, 4.4, 4.3]
    es = trainer.EarlyStopping(monitor="score", patience=3)
    cb = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", save_top_k=0)
    quiet(tmp_path, max_epochs=4, callbacks=[es, cb], enable_checkpointing=True).fit(Scored(scores), data(8), data(8))
    state = es.state_dict()
    assert {k: state[k] for k in ("wait_count", "best_score", "stopped_epoch", "patience")} == {
        "wait_count": 2,
        "best_score": 4.0,
        "stopped_epoch": 0,
        "patience": 3,
    }
    assert state["stopping_reason"] == trainer.callbacks.EarlyStoppingReason.NOT_STOPPED.value
    saved = torch.load(tmp_path / "ckpts" / "last.ckpt", weights_only=True)["callbacks"]
    assert saved[es.state_key] == state

    fresh = trainer.EarlyStopping(monitor="score", patience=3)
    fresh.load_state_dict(saved[es.state_key])
    assert fresh.state_dict() == state
    assert fresh._update(4.2) is True  # the third check without improvement: patience is used up
    assert trainer.EarlyStopping(monitor="score", patience=3)._update(4.2) is False


def test_early_stopping_missing_metric(tmp_path: Path) -> None:
    es = trainer.EarlyStopping(monitor="val_loss")
    with pytest.raises(KeyError, match=r"monitor='val_loss'\) found no such logged metric; logged: \['score'"):
        quiet(tmp_path, max_epochs=2, callbacks=[es]).fit(Scored(), data(8), data(8))


# ---- ProgressBar ----------------------------------------------------------------------------------
class Shown(Regressor):
    """Logs a step metric and a validation metric to the progress bar; remembers its losses."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.losses.append(loss.item())
        self.log("seen", float(batch_idx + 10 * self.current_epoch), prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_metric", 0.25, prog_bar=True)


def test_progress_bar_prints_plain_lines_without_a_tty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bar = trainer.ProgressBar(refresh_rate=1, line_interval_s=0)  # steadytrain 0.1's name builds a TQDMProgressBar
    assert isinstance(bar, trainer.callbacks.TQDMProgressBar)
    module = Shown()
    quiet(tmp_path, max_epochs=2, callbacks=[bar], enable_progress_bar=True).fit(module, data(16), data(8))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Epoch ")]
    pattern = re.compile(r"Epoch (\d): +\d+% (\d)/4 \[.*it/s, seen=(\S+?)(?:, val_metric=(\S+))?\]$")
    parsed = [pattern.match(ln) for ln in lines]
    assert all(parsed), lines
    # One line per batch (refresh_rate=1), one more at the end of epoch 0 as validation added its metric;
    # no `loss=` (only what was logged with prog_bar=True, as in Lightning).
    assert [(int(m[1]), int(m[2])) for m in parsed if m] == [
        (0, 1), (0, 2), (0, 3), (0, 4), (0, 4), (1, 1), (1, 2), (1, 3), (1, 4)
    ]  # fmt: skip
    assert [float(m[3]) for m in parsed if m] == [0, 1, 2, 3, 3, 10, 11, 12, 13]
    # Validation's prog_bar metric appears once validation ran (end of epoch 0 onwards).
    assert [m[4] for m in parsed if m] == [None] * 4 + ["0.250"] * 5


def test_progress_bar_is_quiet_when_disabled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet(tmp_path, max_epochs=1).fit(Shown(), data(16))
    assert "epoch 0" not in capsys.readouterr().out


def test_progress_bar_refresh_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bar = trainer.ProgressBar(refresh_rate=2, line_interval_s=0)
    quiet(tmp_path, max_epochs=1, callbacks=[bar], enable_progress_bar=True).fit(Shown(), data(16))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Epoch ")]
    assert [ln.split(" [")[0] for ln in lines] == ["Epoch 0:  50% 2/4", "Epoch 0: 100% 4/4"]


# ---- last.ckpt at the end of a fit that saved nothing else ---------------------------------------------
def test_last_ckpt_is_written_when_no_epoch_was_due(tmp_path: Path) -> None:
    """Lightning 2.6's rule: ModelCheckpoint(every_n_epochs=2, save_last=True) with max_epochs=1 writes last.ckpt."""
    saver = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_epochs=2, save_last=True)
    run = quiet(tmp_path, max_epochs=1, callbacks=[saver], enable_checkpointing=True)
    run.fit(Regressor(), data(16))
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["last.ckpt"]
    assert saver.last_model_path == str(tmp_path / "ckpts" / "last.ckpt") and saver.best_model_path == ""
    resumed = quiet(
        tmp_path,
        max_epochs=2,
        callbacks=[trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts")],
        enable_checkpointing=True,
    )
    resumed.fit(Regressor(), data(16), ckpt_path="last")
    assert resumed.global_step == 8  # epoch 0 came from last.ckpt


def test_last_ckpt_is_not_rewritten_when_the_due_epoch_saved(tmp_path: Path) -> None:
    saver = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_epochs=2, filename="{epoch}")
    quiet(tmp_path, max_epochs=3, callbacks=[saver], enable_checkpointing=True).fit(Regressor(), data(16))
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["epoch=1.ckpt", "last.ckpt"]
    assert torch.load(tmp_path / "ckpts" / "last.ckpt", weights_only=True)["global_step"] == 8  # as Lightning's
    none = trainer.ModelCheckpoint(dirpath=tmp_path / "none", every_n_epochs=2, save_last=False)
    quiet(tmp_path, max_epochs=1, callbacks=[none], enable_checkpointing=True).fit(Regressor(), data(16))
    assert not (tmp_path / "none").exists()


def test_checkpoint_paths_are_spelled_as_lightning_joins_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``default_root_dir="."``: Lightning's paths are ``os.path.join("./checkpoints", name)``, "./" kept."""
    monkeypatch.chdir(tmp_path)
    checkpoint = trainer.ModelCheckpoint(monitor="val_loss", save_last=True)
    fit = quiet(".", max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint])
    fit.fit(Regressor(), loader(regression_data()), loader(regression_data()))
    callback = fit.checkpoint_callback
    assert callback is not None and callback.dirpath == "./checkpoints"
    assert callback.best_model_path == "./checkpoints/epoch=0-step=12.ckpt"
    assert list(callback.best_k_models) == [callback.best_model_path]
    assert callback.last_model_path == "./checkpoints/last.ckpt" and Path(callback.last_model_path).is_file()
