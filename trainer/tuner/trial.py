"""A search's trial: a short run of the stage on a Trainer of its own, built like the one that runs the stage.

Lightning runs its trials on the running Trainer's own loop and puts the loop back from a checkpoint. Here a
trial Trainer shares the running one's strategy (its processes and devices), precision and settings, but has its
own counters, loops and metrics, no loggers, no checkpoints and no progress bar: only the search's callback.
The stage that called the search is untouched, and ``state.kept`` puts back what the two share (the module,
the strategy's attributes, the RNGs). Each trial is a short ``fit``/``validate``/``test``/``predict`` of the
module: its ``setup``/``teardown`` hooks run for each trial. Warnings a trial raises (the stage already raised
its own) are not shown again.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.callbacks.base import Callback
    from trainer.module import Module
    from trainer.view import TrainerView


def trial_trainer(
    trainer: TrainerView, callbacks: list[Callback], limits: dict[str, int | float], max_steps: int = -1
) -> TrainerView:
    """A Trainer of ``trainer``'s type and settings, with only ``callbacks``, these ``limits`` (by stage:
    "train", "validation", "test", "predict") and ``max_steps``; no sanity check."""
    given = {**trainer.limits, **limits}
    max_epochs = trainer.max_epochs
    strategy = trainer.strategy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return type(trainer)(  # not imported: the Trainer is above the tuner
            accelerator=trainer.accelerator,
            devices=list(strategy.device_indices),
            strategy=strategy,
            num_nodes=trainer.num_nodes,
            precision=trainer.precision,
            max_epochs=-1 if max_epochs is None else max_epochs,
            max_steps=max_steps,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
            gradient_clip_val=trainer.gradient_clip_val,
            gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            val_check_interval=trainer.val_check_interval,
            check_val_every_n_epoch=trainer.check_val_every_n_epoch,
            num_sanity_val_steps=0,
            log_every_n_steps=trainer.log_every_n_steps,
            inference_mode=trainer.inference_mode,
            detect_anomaly=trainer.detect_anomaly,
            default_root_dir=trainer.default_root_dir,
            logger=False,
            callbacks=callbacks,
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            on_nonfinite_loss=trainer.on_nonfinite_loss,
            use_distributed_sampler=trainer.use_distributed_sampler,
            requeue_signal=None,
            limit_train_batches=given["train"],
            limit_val_batches=given["validation"],
            limit_test_batches=given["test"],
            limit_predict_batches=given["predict"],
        )


def run_trial(trial: TrainerView, method: str, module: Module, train: Any = None, datamodule: Any = None) -> None:
    """``method`` ("fit", "validate", "test" or "predict") of ``module`` on the trial Trainer, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "fit":
            trial.fit(module, train, datamodule=datamodule)
        elif method == "predict":
            trial.predict(module, datamodule=datamodule, return_predictions=False)
        else:
            getattr(trial, method)(module, datamodule=datamodule, verbose=False)
