"""BaseFinetuning / BackboneFinetuning and StochasticWeightAveraging: what they change in training, and
that a run resumed from their checkpoints ends bitwise equal to the uninterrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import trainer
from tests.models import assert_bitwise_equal, loader, params, quiet, regression_data
from trainer.callbacks import BackboneFinetuning, BaseFinetuning, LambdaCallback, StochasticWeightAveraging
from trainer.checkpoint import load_checkpoint


class Transfer(trainer.Module):
    """A backbone (with BatchNorm) and a head; the optimizer gets the trainable parameters only."""

    def __init__(self, lr: float = 0.05, adam: bool = False, scheduler: bool = False) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh())
        self.head = nn.Linear(16, 1)
        self.lr, self.adam, self.scheduler = lr, adam, scheduler

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        trainable = [p for p in self.parameters() if p.requires_grad]
        kind = torch.optim.Adam if self.adam else torch.optim.SGD
        opt = kind(trainable, lr=self.lr) if self.adam else kind(trainable, lr=self.lr, momentum=0.9)
        if not self.scheduler:
            return opt
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]


def data(n: int = 32, shuffle: bool = True) -> torch.utils.data.DataLoader:
    return loader(regression_data(n), batch_size=8, shuffle=shuffle)


def every_step(tmp_path: Path) -> trainer.ModelCheckpoint:
    return trainer.ModelCheckpoint(
        dirpath=tmp_path / "ckpts",
        filename="step{step}",
        auto_insert_metric_name=False,
        save_top_k=-1,
        every_n_train_steps=1,
    )


# ---- BaseFinetuning's tools -----------------------------------------------------------------------
def test_freeze_keeps_batchnorm_training_only_with_train_bn() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    BaseFinetuning.freeze(net, train_bn=True)
    assert [p.requires_grad for p in net.parameters()] == [False, False, True, True]
    assert net[1].track_running_stats
    BaseFinetuning.freeze(net, train_bn=False)
    assert not any(p.requires_grad for p in net.parameters()) and not net[1].track_running_stats
    BaseFinetuning.make_trainable([net])
    assert all(p.requires_grad for p in net.parameters()) and net[1].track_running_stats


def test_flatten_modules_takes_nested_iterables_and_module_dicts() -> None:
    a, b, c = nn.Linear(1, 1), nn.Linear(1, 1), nn.Linear(1, 1)
    parent = nn.Sequential(a)
    parent.register_parameter("own", nn.Parameter(torch.zeros(1)))  # a parent with parameters of its own
    found = BaseFinetuning.flatten_modules([parent, [b, nn.ModuleDict({"c": c})]])
    assert [id(m) for m in found] == [id(parent), id(a), id(b), id(c)]
    assert len(list(BaseFinetuning.filter_params([parent, b]))) == 5  # own, a.weight, a.bias, b.weight, b.bias


def test_filter_on_optimizer_compares_identity_not_values() -> None:
    """Two zero-initialised biases are two parameters (Lightning's value comparison would drop one)."""
    first, second = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([first], lr=0.1)
    assert BaseFinetuning.filter_on_optimizer(opt, [second]) == [second]
    with pytest.warns(UserWarning, match="already exist within another group"):
        assert BaseFinetuning.filter_on_optimizer(opt, [first, second]) == [second]


def test_unfreeze_and_add_param_group_divides_the_first_groups_rate() -> None:
    frozen, head = nn.Linear(2, 2), nn.Linear(2, 1)
    BaseFinetuning.freeze(frozen)
    opt = torch.optim.SGD(head.parameters(), lr=0.5)
    BaseFinetuning.unfreeze_and_add_param_group(frozen, opt, initial_denom_lr=5.0)
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == pytest.approx(0.1)
    assert all(p.requires_grad for p in frozen.parameters())
    with pytest.warns(UserWarning, match="already exist within another group"):  # all held already: no empty group
        BaseFinetuning.unfreeze_and_add_param_group(frozen, opt, lr=0.3)
    assert len(opt.param_groups) == 2


def test_a_subclass_without_its_hooks_is_told_which_to_define(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="freeze_before_training"):
        quiet(tmp_path, max_epochs=1, callbacks=[BaseFinetuning()]).fit(Transfer(), data())


# ---- BackboneFinetuning ---------------------------------------------------------------------------
class GroupLog(trainer.Callback):
    """The learning rate of every group and whether the backbone changed, at each epoch's end."""

    def __init__(self) -> None:
        self.lrs: list[list[float]] = []
        self.backbone_moved: list[bool] = []
        self._before: list[torch.Tensor] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._before = [p.detach().clone() for p in pl_module.backbone[0].parameters()]

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.lrs.append([g["lr"] for g in trainer.optimizers[0].param_groups])
        after = list(pl_module.backbone[0].parameters())
        self.backbone_moved.append(any(not torch.equal(a, b) for a, b in zip(after, self._before)))


def test_backbone_trains_from_its_epoch_at_a_growing_rate_capped_by_the_head(tmp_path: Path) -> None:
    log = GroupLog()
    finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 4.0)
    # freeze() leaves BatchNorm training (train_bn), so its parameters are in the head's group already
    with pytest.warns(UserWarning, match="2 parameter"):
        quiet(tmp_path, max_epochs=4, callbacks=[finetuning, log]).fit(Transfer(lr=0.05), data())
    assert log.backbone_moved == [False, True, True, True]
    # epoch 1: 0.05 * 0.1; epoch 2: x4; epoch 3: x4 would pass the head's 0.05, so it stays at 0.05
    assert log.lrs == [[0.05], [0.05, pytest.approx(0.005)], [0.05, pytest.approx(0.02)], [0.05, 0.05]]


def test_backbone_finetuning_needs_a_backbone(tmp_path: Path) -> None:
    from tests.models import Regressor

    with pytest.raises(AttributeError, match="`backbone` attribute"):
        quiet(tmp_path, max_epochs=1, callbacks=[BackboneFinetuning()]).fit(Regressor(), data())


def finetune_run(tmp_path: Path, ckpt: Path | None = None) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = Transfer(lr=0.01, adam=True)
    callbacks = [BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda e: 1.5), every_step(tmp_path)]
    fit = quiet(tmp_path, max_epochs=3, callbacks=callbacks, enable_checkpointing=True)
    fit.fit(module, data(), ckpt_path=ckpt)
    return params(module), fit


BN_IN_HEAD_GROUP = "ignore:2 parameter"  # freeze() leaves BatchNorm training: its parameters are in the head's group


@pytest.mark.filterwarnings(BN_IN_HEAD_GROUP)
def test_resume_before_the_backbone_is_unfrozen_is_bitwise_equal(tmp_path: Path) -> None:
    final, _ = finetune_run(tmp_path / "full")
    for step in (2, 4):  # mid-epoch 0, end of epoch 0
        resumed, fit = finetune_run(tmp_path / f"at{step}", tmp_path / "full" / "ckpts" / f"step{step}.ckpt")
        assert fit.global_step == 12
        assert_bitwise_equal(resumed, final)


@pytest.mark.filterwarnings(BN_IN_HEAD_GROUP)
def test_resume_after_the_backbone_is_unfrozen_is_bitwise_equal(tmp_path: Path) -> None:
    final, _ = finetune_run(tmp_path / "full")
    saved = load_checkpoint(tmp_path / "full" / "ckpts" / "step6.ckpt")["callbacks"]["BackboneFinetuning"]
    assert [len(g["params"]) for g in saved["internal_optimizer_metadata"][0]] == [4, 2]  # head+BN, backbone Linear
    for step in (6, 8, 10):  # mid-epoch 1 (the groups are back without an epoch start), end of epoch 1, epoch 2
        resumed, fit = finetune_run(tmp_path / f"at{step}", tmp_path / "full" / "ckpts" / f"step{step}.ckpt")
        assert fit.global_step == 12
        assert_bitwise_equal(resumed, final)


# ---- StochasticWeightAveraging --------------------------------------------------------------------
class EpochStarts(trainer.Callback):
    """The module's parameters and the learning rate at each epoch start (it runs before SWA's hook)."""

    def __init__(self) -> None:
        self.params: list[list[torch.Tensor]] = []
        self.lrs: list[float] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.params.append(params(pl_module))
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def swa_fit(tmp_path: Path, swa: StochasticWeightAveraging, module: trainer.Module, **kwargs: Any) -> EpochStarts:
    starts = EpochStarts()
    quiet(tmp_path, max_epochs=4, callbacks=[starts, swa], **kwargs).fit(module, data())
    return starts


def test_the_module_ends_with_the_mean_of_the_averaged_epochs_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Transfer()
    module.backbone[1] = nn.Identity()  # no BatchNorm: the weights alone
    starts = swa_fit(tmp_path, StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2), module)
    # Lightning's epochs: the weights at the starts of epochs 1, 2 and 3 (0-based), not after the last
    expected = [torch.stack(ps).mean(0) for ps in zip(*starts.params[1:4])]
    for got, want in zip(module.parameters(), expected):
        torch.testing.assert_close(got.detach(), want)


def test_swalr_anneals_to_swa_lrs_and_pauses_the_modules_scheduler(tmp_path: Path) -> None:
    swa = StochasticWeightAveraging(swa_lrs=0.2, swa_epoch_start=0.5, annealing_epochs=2, annealing_strategy="linear")
    starts = swa_fit(tmp_path, swa, Transfer(lr=0.05, scheduler=True))
    # StepLR halves the rate until SWA starts (epoch index 1); then SWALR goes halfway to 0.2, then all the
    # way (a StepLR still stepping would have halved 0.025 first: 0.10625)
    assert starts.lrs == [0.05, 0.025, pytest.approx(0.5 * 0.2 + 0.5 * 0.025), pytest.approx(0.2)]


def test_batchnorm_statistics_are_recomputed_for_the_averaged_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Transfer()
    swa_fit(tmp_path, StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1), module)
    x = regression_data(32).tensors[0]
    with torch.no_grad():
        features = module.backbone[0](x)
    bn = module.backbone[1]
    torch.testing.assert_close(bn.running_mean, features.mean(0))
    assert int(bn.num_batches_tracked) == 4  # one pass over the 4 training batches


def test_an_early_stop_keeps_the_trained_weights(tmp_path: Path) -> None:
    """Lightning's rule: the average replaces the weights only when training reached max_epochs."""
    stop = LambdaCallback(on_train_epoch_end=lambda t, m: setattr(t, "should_stop", t.current_epoch == 2))
    module = Transfer()
    module.backbone[1] = nn.Identity()
    starts = EpochStarts()
    quiet(tmp_path, max_epochs=4, callbacks=[starts, StochasticWeightAveraging(0.01, swa_epoch_start=1), stop]).fit(
        module, data()
    )
    assert len(starts.params) == 3 and not all(
        torch.equal(a, b) for a, b in zip(params(module), starts.params[2])
    )  # trained on past the last average's epoch start, and not replaced by the average


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"swa_lrs": 0}, "swa_lrs"),
        ({"swa_lrs": [0.1, -1.0]}, "swa_lrs"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 0}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 1.5}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "annealing_strategy": "exp"}, "annealing_strategy"),
    ],
)
def test_swa_refuses_bad_arguments(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        StochasticWeightAveraging(**kwargs)


def test_swa_refuses_what_it_cannot_average_at_fit_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fraction of max_epochs"):
        quiet(tmp_path, max_epochs=-1, max_steps=2, callbacks=[StochasticWeightAveraging(0.1)]).fit(Transfer(), data())

    class NoForward(Transfer):
        forward = nn.Module.forward  # type: ignore[assignment]

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.mse_loss(self.head(self.backbone(batch[0])), batch[1])

    with pytest.raises(TypeError, match="define forward"):
        quiet(tmp_path, max_epochs=2, callbacks=[StochasticWeightAveraging(0.1)]).fit(NoForward(), data())


def swa_run(tmp_path: Path, ckpt: Path | None = None) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = Transfer(lr=0.05, scheduler=True)
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=2)
    fit = quiet(tmp_path, max_epochs=4, callbacks=[swa, every_step(tmp_path)], enable_checkpointing=True)
    fit.fit(module, data(), ckpt_path=ckpt)
    return [*params(module), module.backbone[1].running_mean.clone()], fit


def test_resume_during_averaging_is_bitwise_equal(tmp_path: Path) -> None:
    final, _ = swa_run(tmp_path / "full")
    saved = load_checkpoint(tmp_path / "full" / "ckpts" / "step6.ckpt")
    assert saved["callbacks"]["StochasticWeightAveraging"]["average_model_state"]["n_averaged"] == 1
    assert saved["lr_schedulers"][0]["gamma"] == 0.5  # the paused StepLR's own state
    for step in (2, 6, 8, 14):  # before SWA, mid-epoch while averaging, its end, the last epoch
        resumed, fit = swa_run(tmp_path / f"at{step}", tmp_path / "full" / "ckpts" / f"step{step}.ckpt")
        assert fit.global_step == 16
        assert_bitwise_equal(resumed, final)


FINETUNE_DDP = Path(__file__).parent / "scripts" / "finetune_ddp.py"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["epoch", "batch"])
def test_layers_unfrozen_under_ddp_train_on_the_global_batch(tmp_path: Path, mode: str) -> None:
    """DDP fixes the parameters it all-reduces when it wraps the module; layers unfrozen later (at an
    epoch start by BackboneFinetuning, or mid-epoch in a hook) must still average across ranks."""
    from tests.helpers import run_python
    from tests.scripts.finetune_ddp import run

    run(tmp_path, mode)  # one device, the same global batch
    single = torch.load(tmp_path / "params-rank0.pt", weights_only=True)["params"]
    ddp_dir = tmp_path / "ddp"
    ddp_dir.mkdir()
    done = run_python([str(FINETUNE_DDP), str(ddp_dir), mode, "--strategy", "ddp", "--devices", "2"], timeout=120)
    assert done.returncode == 0, done.output
    ranks = [torch.load(ddp_dir / f"params-rank{r}.pt", weights_only=True)["params"] for r in (0, 1)]
    assert_bitwise_equal(ranks[0], ranks[1])
    for got, want in zip(ranks[0], single, strict=True):
        assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
