"""Manual optimization (``automatic_optimization = False``): a GAN against a hand-written loop,
flags that cannot apply refused, exact resume of every optimizer and scheduler, and 2 DDP ranks
(with clipping in ``training_step`` on the global gradient, under DDP and FSDP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.helpers import REPO_ROOT, run_python
from tests.models import assert_bitwise_equal, quiet
from tests.scripts.gan import GAN, GLOBAL_BATCH, gan_data, hand_written
from tests.scripts.manual_clip import CLIP, EPOCHS, train

SCRIPT = REPO_ROOT / "tests" / "scripts" / "gan.py"
CLIP_SCRIPT = REPO_ROOT / "tests" / "scripts" / "manual_clip.py"


def gan_params(module: GAN) -> list[torch.Tensor]:
    return [p.detach().clone() for p in [*module.generator.parameters(), *module.discriminator.parameters()]]


def fit_gan(tmp_path: Path, epochs: int = 3, ckpt: Path | None = None, **flags: Any) -> tuple[GAN, trainer.Trainer]:
    module = GAN()
    fit = quiet(tmp_path, max_epochs=epochs, **flags)
    fit.fit(module, DataLoader(gan_data(), batch_size=GLOBAL_BATCH), ckpt_path=ckpt)
    return module, fit


def test_a_gan_equals_the_hand_written_loop_bitwise(tmp_path: Path) -> None:
    module, fit = fit_gan(tmp_path)
    assert_bitwise_equal(gan_params(module), hand_written(epochs=3))
    assert fit.global_step == 3 * 4 * 2  # every optimizer step counts, as in Lightning
    assert {"g_loss", "d_loss"} <= set(fit.callback_metrics)
    assert [s.last_epoch for s in module.lr_schedulers()] == [3, 3]


def test_resume_from_any_step_restores_both_optimizers_and_schedulers_exactly(tmp_path: Path) -> None:
    every = trainer.ModelCheckpoint(
        dirpath=tmp_path / "ckpts", filename="{step}", save_top_k=-1, every_n_train_steps=2, save_last=False
    )
    full, _ = fit_gan(tmp_path / "full", enable_checkpointing=True, callbacks=[every])
    for step in (2, 8, 10):  # mid-epoch in epoch 0, an epoch's end, mid-epoch in epoch 1
        resumed, fit = fit_gan(tmp_path / f"r{step}", ckpt=tmp_path / "ckpts" / f"step={step}.ckpt")
        assert fit.global_step == 24
        assert_bitwise_equal(gan_params(resumed), gan_params(full))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"accumulate_grad_batches": 2}, r"accumulate_grad_batches=2 has no effect with manual optimization"),
        ({"gradient_clip_val": 1.0}, r"gradient_clip_val has no effect with manual optimization.*clip_gradients"),
    ],
)
def test_flags_that_cannot_apply_in_manual_mode_are_refused_before_any_step(
    tmp_path: Path, flags: dict[str, Any], message: str
) -> None:
    module = GAN()
    before = gan_params(module)
    with pytest.raises(ValueError, match=message):
        quiet(tmp_path, max_epochs=1, **flags).fit(module, DataLoader(gan_data(), batch_size=GLOBAL_BATCH))
    assert_bitwise_equal(gan_params(module), before)


def test_optimizers_and_schedulers_outside_fit_are_a_clear_error() -> None:
    module = GAN()
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        module.optimizers()


@pytest.mark.slow
def test_a_gan_on_two_ddp_ranks_matches_one_device_with_plain_ddp(tmp_path: Path) -> None:
    """Two backward passes and frozen parameters per step, without find_unused_parameters (Lightning
    ends 0.0066 away from one device here)."""
    done = run_python([str(SCRIPT), str(tmp_path), "--strategy", "ddp", "--devices", "2"], timeout=180)
    assert done.returncode == 0, done.output
    reference = hand_written(epochs=3)
    ranks = [torch.load(tmp_path / f"params-rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert_bitwise_equal(ranks[0]["params"], ranks[1]["params"])  # the ranks agree exactly
    for got, want in zip(ranks[0]["params"], reference, strict=True):
        assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
    assert ranks[0]["global_step"] == 24


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_clip_gradients_in_training_step_clips_the_global_gradient_on_two_ranks(tmp_path: Path, strategy: str) -> None:
    """Lightning's rule: in manual optimization the gradients are the global batch's when manual_backward
    returns, so clip_gradients between it and opt.step() (by norm, by value) acts on them, as does a
    read of p.grad; 2 ranks x 8 samples then end where 1 device x 16 does. (DDP used to average only
    in opt.step(), clipping each rank's own gradient: 0.08 away by norm, 0.3 by value.)"""
    done = run_python([str(CLIP_SCRIPT), str(tmp_path), "--strategy", strategy, "--devices", "2"], timeout=180)
    assert done.returncode == 0, done.output
    for algorithm, limit in CLIP.items():
        one = train(algorithm, default_root_dir=tmp_path)  # one device, the global batch
        assert one["global_step"] == EPOCHS * 4
        assert all(size > limit for size in one["seen"]), one["seen"]  # clipping acts on every step
        for rank in (0, 1):
            got = torch.load(tmp_path / f"{algorithm}-rank{rank}.pt", weights_only=True)
            assert got["global_step"] == one["global_step"]
            assert got["params"].keys() == one["params"].keys()
            for name, want in one["params"].items():
                diff = (got["params"][name] - want).abs().max().item()
                assert diff <= 1e-5, f"{algorithm} rank {rank} {name}: {diff}"
            assert got["seen"] == pytest.approx(one["seen"], abs=1e-5), (algorithm, rank)  # p.grad is global


class _Toggling(trainer.Module):
    """Two optimizers sharing one layer; records ``requires_grad`` while toggled and after."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.shared, self.first, self.second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        self.first.bias.requires_grad = False  # the user's own choice: toggling must keep it
        self.seen: list[dict[str, bool]] = []

    def _flags(self) -> dict[str, bool]:
        return {name: p.requires_grad for name, p in self.named_parameters()}

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_first, _ = self.optimizers()
        self.toggle_optimizer(opt_first)
        self.seen.append(self._flags())
        self.untoggle_optimizer(opt_first)
        self.seen.append(self._flags())

    def configure_optimizers(self) -> Any:
        first = torch.optim.SGD([*self.shared.parameters(), *self.first.parameters()], lr=0.1)
        second = torch.optim.SGD([*self.shared.parameters(), *self.second.parameters()], lr=0.1)
        return [first, second]


def test_toggle_optimizer_freezes_only_the_other_optimizers_parameters_and_untoggle_restores_them(
    tmp_path: Path,
) -> None:
    module = _Toggling()
    before = module._flags()
    quiet(tmp_path, max_epochs=1).fit(module, DataLoader(torch.randn(4, 2), batch_size=4))
    toggled, untoggled = module.seen
    assert toggled == {**before, "second.weight": False, "second.bias": False}  # shared stays trainable
    assert untoggled == before  # first.bias stays frozen: it was the user's choice
