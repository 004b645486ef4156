"""A run started under Lightning continues under steadytrain and ends where Lightning's own continuation ends.

The checkpoints are written by real Lightning (skipped where it is not installed); each is then
continued twice, by Lightning and by us, from the same weights: parameters (1e-6), global step,
learning rate and the callbacks' states must agree. Shuffling is off and ``num_workers=0``, so
data order is not the question here.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer
from trainer.callbacks import EarlyStopping
from trainer.checkpoint import CheckpointError

pl = pytest.importorskip("lightning.pytorch")

EPOCHS = 3


def _regressor(base: type) -> type:
    """The same module under either framework: Adam, a per-epoch StepLR, validation logging ``val_loss``."""

    class Regressor(base):  # type: ignore[misc,valid-type]
        def __init__(self, lr: float = 0.05) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", nn.functional.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self) -> Any:
            opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    return Regressor


LightningRegressor, OurRegressor = _regressor(pl.LightningModule), _regressor(trainer.Module)


def _loaders() -> tuple[DataLoader, DataLoader]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 4, generator=gen)
    data = TensorDataset(x, x.sum(1, keepdim=True).sin())
    return DataLoader(data, batch_size=8), DataLoader(data, batch_size=20)  # 5 training batches an epoch


def _callbacks(module: Any, folder: Path) -> list[Any]:
    """Lightning's or ours, with the same settings: every 3rd step, best ``val_loss``, early stopping."""
    every = module.ModelCheckpoint(dirpath=folder / "steps", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    best = module.ModelCheckpoint(dirpath=folder / "best", monitor="val_loss", save_top_k=-1, filename="{step}")
    return [every, best, module.EarlyStopping("val_loss", patience=10)]


def _lightning_fit(folder: Path, ckpt: Path | None) -> Any:
    torch.manual_seed(0)
    module = LightningRegressor()
    fit = pl.Trainer(
        accelerator="cpu", max_epochs=EPOCHS, callbacks=_callbacks(pl.callbacks, folder), logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=folder,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit.fit(module, *_loaders(), ckpt_path=ckpt)
    return fit


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lightning")
    _lightning_fit(folder, None)
    return folder


def _ours(folder: Path, ckpt: Path) -> trainer.Trainer:
    torch.manual_seed(0)
    fit = trainer.Trainer(
        accelerator="cpu", max_epochs=EPOCHS, callbacks=_callbacks(trainer.callbacks, folder), logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=folder,
    )  # fmt: skip
    fit.fit(OurRegressor(), *_loaders(), ckpt_path=ckpt)
    return fit


@pytest.mark.parametrize(
    "name",
    ["steps/step=3.ckpt", "best/step=5.ckpt", "steps/step=6.ckpt"],
    ids=["mid-epoch-0", "epoch-end", "mid-epoch-1-first-batch"],
)
def test_a_lightning_checkpoint_continues_to_lightnings_result(lightning_run: Path, tmp_path: Path, name: str) -> None:
    ckpt = lightning_run / name
    theirs = _lightning_fit(tmp_path / "lightning", ckpt)
    mid_epoch = name.startswith("steps/")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = _ours(tmp_path / "ours", ckpt)
    assert any("Lightning records no data position" in str(w.message) for w in caught) == mid_epoch
    for mine, lightning in zip(ours.lightning_module.parameters(), theirs.lightning_module.parameters(), strict=True):
        torch.testing.assert_close(mine, lightning, rtol=1e-6, atol=1e-7)
    assert (ours.global_step, ours.current_epoch) == (theirs.global_step, theirs.current_epoch)
    assert ours.optimizers[0].param_groups[0]["lr"] == pytest.approx(theirs.optimizers[0].param_groups[0]["lr"])
    best_ours, best_theirs = ours.checkpoint_callbacks[1], theirs.checkpoint_callbacks[1]
    assert float(best_ours.best_model_score) == pytest.approx(float(best_theirs.best_model_score), rel=1e-6)
    saved = torch.load(ckpt, weights_only=True)["callbacks"]
    ranked = next(state for key, state in saved.items() if key.startswith("ModelCheckpoint{'monitor': 'val_loss'"))
    # Another dirpath than the checkpoint's: as under Lightning, the saved top-k (files in that folder) stays behind.
    for best in (best_ours, best_theirs):
        assert set(ranked["best_k_models"]).isdisjoint(best.best_k_models)
    stopping_ours = next(cb for cb in ours.callbacks if isinstance(cb, EarlyStopping))
    stopping_theirs = next(cb for cb in theirs.callbacks if isinstance(cb, pl.callbacks.EarlyStopping))
    assert float(stopping_ours.best_score) == pytest.approx(float(stopping_theirs.best_score), rel=1e-6)


def test_our_checkpoint_in_an_epoch_continued_from_lightning_resumes_exactly(
    lightning_run: Path, tmp_path: Path
) -> None:
    """Lightning's step=6 is one batch into epoch 1, whose loader then restarts; our step=9 in that epoch must
    record the loader's own position (3 batches), not the epoch's count (4), for its resume to be exact."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        continued = _ours(tmp_path / "ours", lightning_run / "steps" / "step=6.ckpt")
    again = _ours(tmp_path / "again", tmp_path / "ours" / "steps" / "step=9.ckpt")
    assert again.global_step == continued.global_step
    for mine, uninterrupted in zip(again.lightning_module.parameters(), continued.lightning_module.parameters()):
        assert torch.equal(mine, uninterrupted)


def _resaved(source: Path, target: Path, change: Any) -> Path:
    checkpoint = torch.load(source, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, target)
    return target


def _stateful_loader(checkpoint: dict[str, Any]) -> None:
    checkpoint["loops"]["fit_loop"]["state_dict"] = {"combined_loader": [{"position": 3}]}


def _in_a_step(checkpoint: dict[str, Any]) -> None:
    total = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]
    total["processed"], total["completed"] = total["processed"] - 1, total["completed"] - 1  # started, not processed


def _scaler(checkpoint: dict[str, Any]) -> None:
    checkpoint["MixedPrecision"] = {"scale": 1024.0, "growth_factor": 2.0}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_stateful_loader, "state steadytrain does not restore (state_dict={'combined_loader'"),
        (_in_a_step, "saved inside a training step"),
        (_scaler, "GradScaler's state"),
    ],
    ids=["stateful-loader", "inside-a-step", "scaler-without-amp"],
)
def test_a_lightning_checkpoint_read_partly_is_refused_before_anything_loads(
    lightning_run: Path, tmp_path: Path, change: Any, named: str
) -> None:
    ckpt = _resaved(lightning_run / "steps/step=3.ckpt", tmp_path / "changed.ckpt", change)
    module = OurRegressor()
    before = [p.detach().clone() for p in module.parameters()]
    fit = trainer.Trainer(accelerator="cpu", max_epochs=EPOCHS, logger=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match="cannot be continued exactly, so nothing of it was loaded") as err:
        fit.fit(module, *_loaders(), ckpt_path=ckpt)
    assert named in str(err.value)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_a_weights_only_lightning_checkpoint_says_how_to_use_it(lightning_run: Path, tmp_path: Path) -> None:
    keep = {"state_dict", "pytorch-lightning_version", "epoch", "global_step", "hyper_parameters"}
    ckpt = _resaved(
        lightning_run / "best/step=5.ckpt",
        tmp_path / "weights.ckpt",
        lambda c: [c.pop(k) for k in list(c) if k not in keep],
    )
    fit = trainer.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"without \['loops', 'optimizer_states', 'lr_schedulers'\]"):
        fit.fit(OurRegressor(), *_loaders(), ckpt_path=ckpt)
    assert OurRegressor.load_from_checkpoint(ckpt).hparams.lr == 0.05  # its weights still load


def test_a_callback_state_no_callback_takes_is_named_as_lightning_does(lightning_run: Path, tmp_path: Path) -> None:
    fit = trainer.Trainer(
        accelerator="cpu", max_epochs=EPOCHS, logger=False, enable_progress_bar=False, enable_checkpointing=False
    )
    with pytest.warns(UserWarning, match=r"Please add the following callbacks: \[\"EarlyStopping\{'monitor'"):
        fit.fit(OurRegressor(), *_loaders(), ckpt_path=lightning_run / "best/step=5.ckpt")
    assert fit.global_step == 5 * EPOCHS


def test_lightnings_grad_scaler_state_continues_in_ours(lightning_run: Path, tmp_path: Path) -> None:
    """Lightning's ``MixedPrecision`` plugin saves its GradScaler's state under that key (on CUDA: the test below)."""
    saved = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    ckpt = _resaved(
        lightning_run / "best/step=5.ckpt",
        tmp_path / "amp.ckpt",
        lambda c: c.update(MixedPrecision={**saved, "_growth_tracker": 7}),
    )
    fit = trainer.Trainer(
        accelerator="cpu", max_epochs=2, precision="16-mixed", logger=False, enable_progress_bar=False,
        enable_checkpointing=False,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fp16 on the CPU is slow; the callbacks' states have no callback here
        fit.fit(OurRegressor(), *_loaders(), ckpt_path=ckpt)
    scaler = fit.precision_plugin.scaler  # type: ignore[attr-defined]
    assert scaler.get_scale() == 1024.0 and scaler._get_growth_tracker() == 7 + 5  # 5 more finite steps


@pytest.mark.cuda
def test_a_lightning_16_mixed_run_continues_on_cuda(tmp_path: Path) -> None:
    """A real fp16 run: Lightning's checkpoint (weights, Adam, scaler, mid-epoch position) continued both ways."""

    def lightning(ckpt: Path | None, folder: Path) -> Any:
        torch.manual_seed(0)
        module, every = LightningRegressor(), pl.callbacks.ModelCheckpoint(folder, every_n_train_steps=3, save_top_k=-1)
        fit = pl.Trainer(
            accelerator="cuda", devices=1, precision="16-mixed", max_epochs=EPOCHS, callbacks=[every], logger=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        )  # fmt: skip
        fit.fit(module, *_loaders(), ckpt_path=ckpt)
        return fit

    lightning(None, tmp_path / "first")
    ckpt = tmp_path / "first" / "epoch=0-step=3.ckpt"
    assert "MixedPrecision" in torch.load(ckpt, weights_only=True)
    theirs = lightning(ckpt, tmp_path / "theirs")
    ours = trainer.Trainer(
        accelerator="cuda", devices=1, precision="16-mixed", max_epochs=EPOCHS, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours.fit(OurRegressor(), *_loaders(), ckpt_path=ckpt)
    for mine, lightning_param in zip(ours.lightning_module.parameters(), theirs.lightning_module.parameters()):
        torch.testing.assert_close(mine, lightning_param, rtol=1e-6, atol=1e-7)
    assert ours.global_step == theirs.global_step
    assert ours.precision_plugin.scaler.get_scale() == theirs.precision_plugin.scaler.get_scale()  # type: ignore[attr-defined]


def test_pickled_hyper_parameters_are_refused_unless_allowed(lightning_run: Path, tmp_path: Path) -> None:
    """Read with weights_only=True: a Lightning file holding a ``Path`` hyper-parameter names it, and continues
    once that class is allowed."""
    ckpt = _resaved(
        lightning_run / "best/step=5.ckpt",
        tmp_path / "hparams.ckpt",
        lambda c: c["hyper_parameters"].update(root=tmp_path),
    )
    fit = trainer.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False, default_root_dir=tmp_path
    )
    with pytest.raises(CheckpointError, match=r"PosixPath.*the file was NOT executed"):
        fit.fit(OurRegressor(), *_loaders(), ckpt_path=ckpt)
    with torch.serialization.safe_globals([type(tmp_path)]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the callbacks' states have no callback here
        fit.fit(OurRegressor(), *_loaders(), ckpt_path=ckpt)
    assert fit.global_step == 10
