"""Evaluation and prediction: every sample once across ranks, without shifting training's RNG."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainer import data
from trainer.data.resolve import resolve_loaders
from trainer.results import Results
from trainer.run import call_hook, prepare_run
from trainer.seed import rng_state, set_rng_state
from trainer.signals import start_iterator

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.strategies.base import Stage
    from trainer.trainer import Trainer


def evaluate(trainer: Trainer, stage: Stage, loaders: list[Any], limit: int | float | None) -> dict[str, float]:
    """Every sample once across ranks; epoch metrics reduced exactly. Returns them as floats."""
    module = trainer.module
    assert module is not None
    was_training = module.training
    previous = trainer.results
    trainer.results = results = Results(stage, trainer.strategy)
    module.eval()
    call_hook(trainer, f"on_{stage}_epoch_start")
    # Evaluation must not shift training's random streams (iter() of a loader draws a seed):
    # then validating more or less often never changes what training computes.
    rng = rng_state()
    try:
        with torch.no_grad():
            for loader in loaders:
                _eval_loader(trainer, module, results, stage, loader, limit)
    finally:
        set_rng_state(rng)
    call_hook(trainer, f"on_{stage}_epoch_end")
    from trainer.run import log_epoch_metrics

    metrics = log_epoch_metrics(trainer, results, stage)
    trainer.results = previous
    module.train(was_training)
    return metrics


def _eval_loader(
    trainer: Trainer, module: Module, results: Results, stage: Stage, loader: Any, limit: int | float | None
) -> None:
    strategy = trainer.strategy
    step = trainer.precision.autocast(strategy.step_function(stage))
    to_device = strategy.batch_mover()
    total = data.num_batches(loader, limit)
    hook = f"on_{stage}_batch_end"
    for batch_idx, batch in enumerate(start_iterator(loader)):
        if batch_idx >= total:
            break
        if to_device is not None:
            batch = to_device(batch)
        results.batch = batch
        output = step(batch, batch_idx)
        for cb in trainer.callbacks:
            getattr(cb, hook)(trainer, module, output, batch, batch_idx)


def run_evaluation(
    trainer: Trainer, stage: Stage, module: Module, loaders: Any, datamodule: Any, ckpt_path: Any
) -> list[dict[str, float]]:
    """``Trainer.validate``/``test``: load weights if asked, evaluate, return the metrics."""
    if not hasattr(module, f"{stage}_step"):
        raise AttributeError(f"{type(module).__name__} has no {stage}_step(); define it to run {stage}.")
    trainer.stage = stage
    with prepare_run(trainer, module, stage) as run:
        eval_loaders, _ = resolve_loaders(
            trainer.strategy, trainer.use_distributed_sampler, module, stage, loaders, None, datamodule
        )
        run.restore(ckpt_path, weights_only=True)
        flag = trainer.use_distributed_sampler
        prepared = [data.prepare_eval_loader(v, trainer.world_size, trainer.global_rank, flag) for v in eval_loaders]
        metrics = evaluate(trainer, stage, prepared, trainer.limits[stage])
    return [metrics]


def run_prediction(trainer: Trainer, module: Module, loaders: Any, datamodule: Any, ckpt_path: Any) -> list[Any]:
    """``Trainer.predict``: outputs of ``predict_step`` for this rank's share, in order."""
    trainer.stage = "predict"
    outputs: list[Any] = []
    with prepare_run(trainer, module, "predict") as run:
        pred_loaders, _ = resolve_loaders(
            trainer.strategy, trainer.use_distributed_sampler, module, "predict", loaders, None, datamodule
        )
        run.restore(ckpt_path, weights_only=True)
        flag = trainer.use_distributed_sampler
        module.eval()
        for loader in pred_loaders:
            prepared = data.prepare_eval_loader(loader, trainer.world_size, trainer.global_rank, flag)
            total = data.num_batches(prepared, trainer.limits["predict"])
            step = trainer.precision.autocast(trainer.strategy.step_function("predict"))
            to_device = trainer.strategy.batch_mover()
            with torch.no_grad():
                for batch_idx, batch in enumerate(start_iterator(prepared)):
                    if batch_idx >= total:
                        break
                    outputs.append(step(batch if to_device is None else to_device(batch), batch_idx))
    return outputs
