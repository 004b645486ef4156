"""What a checkpoint holds and how a Trainer is put back into that state.

A checkpoint records everything that decides the rest of the run: weights, optimizer,
schedulers, scaler, the loop position (epoch, batches done, global step), every rank's RNG,
the RNG that ordered the current epoch, accumulated gradients, callbacks and loggers. With
these, a resumed run continues bit for bit as if it had never stopped.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.seed import rng_state

if TYPE_CHECKING:
    from trainer.trainer import Trainer

FORMAT = "steadytrain/1"


def _accumulated_grads(trainer: Trainer) -> list[torch.Tensor | None] | None:
    """Gradients of a half-finished accumulation window (None at a step boundary)."""
    if trainer.accumulate_grad_batches == 1 or trainer.batches_done % trainer.accumulate_grad_batches == 0:
        return None
    assert trainer.module is not None
    return [None if p.grad is None else p.grad.detach().cpu() for p in trainer.module.parameters()]


def trainer_state(trainer: Trainer) -> dict[str, Any]:
    """Build the checkpoint on every rank (collective: per-rank RNG is gathered)."""
    module = trainer.module
    assert module is not None
    strategy = trainer.strategy
    per_rank = strategy.gather_objects(
        {"rng": rng_state(), "epoch_rng": trainer.epoch_rng, "grads": _accumulated_grads(trainer)}
    )
    dropped = sorted(set(module.hparams) - set(module.primitive_hparams()))
    if dropped and strategy.is_global_zero and trainer.config is None:  # the CLI config holds them
        warnings.warn(
            f"hyper-parameters {dropped} are not plain values and are left out of the checkpoint.",
            stacklevel=3,
        )
    checkpoint: dict[str, Any] = {
        "format": FORMAT,
        "state_dict": strategy.module_state_dict(),
        "hparams": module.primitive_hparams(),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "optimizers": [opt.state_dict() for opt in trainer.optimizers],
        "lr_schedulers": [config.scheduler.state_dict() for config in trainer.lr_schedulers],
        "precision": trainer.precision.state_dict(),
        "loop": {
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "batches_done": trainer.batches_done,
            "epoch_finished": trainer.epoch_finished,
            "world_size": trainer.world_size,
        },
        "ranks": per_rank,
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "loggers": [lg.state_dict() for lg in trainer.loggers],
        "config": trainer.config,
        "versions": {"torch": str(torch.__version__)},
    }
    module.on_save_checkpoint(checkpoint)
    for cb in trainer.callbacks:
        cb.on_save_checkpoint(trainer, module, checkpoint)
    return checkpoint


def save_trainer_checkpoint(trainer: Trainer, path: Path, state: dict[str, Any] | None = None) -> None:
    """Every rank builds the state; global rank zero writes it atomically; all wait for it."""
    from trainer.checkpoint import save_checkpoint

    state = trainer_state(trainer) if state is None else state
    if trainer.is_global_zero:
        save_checkpoint(state, path)
    trainer.strategy.barrier()


def resolve_checkpoint_path(trainer: Trainer, ckpt_path: Any) -> Path | None:
    """``"last"`` is the newest complete checkpoint under the run folders, or None (fresh start)."""
    if str(ckpt_path) != "last":
        path = Path(ckpt_path)
        if not path.is_file():
            raise FileNotFoundError(f"ckpt_path={str(ckpt_path)!r} does not exist or is not a file.")
        return path
    from trainer.checkpoint import find_last_checkpoint

    callback = trainer.checkpoint_callback
    folders = [Path(callback.dirpath)] if callback is not None and callback.dirpath else []
    folders += [p for p in trainer.default_root_dir.glob("**/checkpoints") if p.is_dir()]
    found = [f for f in (find_last_checkpoint(d) for d in folders) if f is not None]
    if not found:
        if trainer.is_global_zero:
            print(
                f"steadytrain: ckpt_path='last' found no checkpoint under {trainer.default_root_dir}; starting fresh."
            )
        return None
    return max(found, key=lambda p: p.stat().st_mtime_ns)


def restore_trainer_checkpoint(trainer: Trainer, path: Path, weights_only: bool = False) -> None:
    """Load weights (always) and, for a resume, everything else the checkpoint records."""
    from trainer.checkpoint import load_checkpoint, load_weights

    checkpoint = load_checkpoint(path, map_location="cpu")
    module = trainer.module
    assert module is not None
    load_weights(module, checkpoint, strict=True)
    if weights_only:
        return
    if checkpoint.get("format") != FORMAT:
        raise ValueError(
            f"{path} holds weights only (no trainer state), so it cannot resume a run; load it with "
            "trainer.checkpoint.load_weights(module, path) before fit() instead."
        )
    module.on_load_checkpoint(checkpoint)
    _restore_optimization(trainer, checkpoint, path)
    _restore_loop(trainer, checkpoint, path)
    for cb in trainer.callbacks:
        if cb.state_key in checkpoint["callbacks"]:
            cb.load_state_dict(checkpoint["callbacks"][cb.state_key])
        cb.on_load_checkpoint(trainer, module, checkpoint)
    if trainer.is_global_zero:
        for lg, lg_state in zip(trainer.loggers, checkpoint["loggers"]):
            lg.load_state_dict(lg_state)


def _restore_optimization(trainer: Trainer, checkpoint: dict[str, Any], path: Path) -> None:
    saved, current = checkpoint["optimizers"], trainer.optimizers
    if len(saved) != len(current):
        raise ValueError(f"{path} has {len(saved)} optimizer state(s) but configure_optimizers() made {len(current)}.")
    for optimizer, state in zip(current, saved):
        optimizer.load_state_dict(state)
    schedulers = checkpoint["lr_schedulers"]
    if len(schedulers) != len(trainer.lr_schedulers):
        raise ValueError(
            f"{path} has {len(schedulers)} LR scheduler(s) but the module made {len(trainer.lr_schedulers)}."
        )
    for config, state in zip(trainer.lr_schedulers, schedulers):
        config.scheduler.load_state_dict(state)
    trainer.precision.load_state_dict(checkpoint["precision"])


def _restore_loop(trainer: Trainer, checkpoint: dict[str, Any], path: Path) -> None:
    loop = checkpoint["loop"]
    trainer.current_epoch = loop["epoch"]
    trainer.global_step = loop["global_step"]
    trainer.batches_done = loop["batches_done"]
    if loop["epoch_finished"]:
        trainer.current_epoch += 1
        trainer.batches_done = 0
    ranks = checkpoint["ranks"]
    if loop["world_size"] != trainer.world_size:
        if trainer.batches_done:
            raise ValueError(
                f"{path} was saved mid-epoch by {loop['world_size']} rank(s); resume it with the same number of "
                f"ranks (now {trainer.world_size}), or from an end-of-epoch checkpoint."
            )
        warnings.warn(
            f"resuming a {loop['world_size']}-rank checkpoint on {trainer.world_size} rank(s): "
            "weights and optimizer are exact, random streams are not.",
            stacklevel=3,
        )
        return
    mine = ranks[trainer.global_rank]
    trainer.resume_rng = mine["rng"]
    trainer.epoch_rng = mine["epoch_rng"]
    if mine["grads"] is not None:
        assert trainer.module is not None
        device = trainer.strategy.root_device
        for param, grad in zip(trainer.module.parameters(), mine["grads"]):
            param.grad = None if grad is None else grad.to(device)
