"""``WeightAveraging`` and ``EMAWeightAveraging``: keep an ``AveragedModel`` of the module, Lightning's way.

The average is updated after the optimizer steps (and epochs) that ``should_update`` picks; validation and the
end of training see the averaged weights. A checkpoint holds the average under ``state_dict`` (what a loaded
model should be), the live weights under ``current_model_state`` and the average's count under
``averaging_state``, so a resumed run continues both. Only a run that uses the callback pays its per-step update.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from copy import deepcopy
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

log = logging.getLogger(__name__)
_PREFIX = "module."  # AveragedModel's name for the averaged copy


def _averaged(module: Module, device: Any, use_buffers: bool, kwargs: dict[str, Any]) -> AveragedModel:
    """``AveragedModel`` deep-copies the module; its Trainer is held aside so that only the weights are copied."""
    try:
        held = module.trainer
    except RuntimeError:
        held = None
    module.trainer = None
    try:
        return AveragedModel(model=module, device=device, use_buffers=use_buffers, **kwargs)
    finally:
        module.trainer = held


class WeightAveraging(Callback):
    """Average the module's weights (and buffers, ``use_buffers``) after each step ``should_update`` accepts.

    ``device`` holds the average (None: the module's device); ``**kwargs`` go to ``AveragedModel`` (``avg_fn``,
    ``multi_avg_fn``; none: the equal-weight mean of SWA). Override ``should_update(step_idx, epoch_idx)`` to
    choose when: it gets a zero-based optimizer step after each step, and an epoch after each epoch.
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        self._device = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        self._latest_update_step = 0  # optimizer steps at the last update: the first call is after a real step
        self._latest_update_epoch = -1

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after optimizer step ``step_idx`` or epoch ``epoch_idx`` (one is None).
        The default: after every optimizer step."""
        return step_idx is not None

    # ---- hooks --------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if stage != "fit":
            return
        if type(pl_module).configure_model is not _base_configure_model():
            warnings.warn(
                "You're using the WeightAveraging callback with a model that overrides the configure_model "
                "callback. WeightAveraging doesn't support sharding model layers, so you may run out of memory.",
                stacklevel=2,
            )
            pl_module.configure_model()
        device = self._device if self._device is not None else pl_module.device
        self._average_model = _averaged(pl_module, device, self._use_buffers, self._kwargs)

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step > self._latest_update_step and self.should_update(step_idx=step - 1):
            assert self._average_model is not None
            self._average_model.update_parameters(pl_module)
            self._latest_update_step = step

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        epoch = trainer.current_epoch
        if epoch > self._latest_update_epoch and self.should_update(epoch_idx=epoch):
            assert self._average_model is not None
            self._average_model.update_parameters(pl_module)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        assert self._average_model is not None
        self._copy_average_to_current(pl_module)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self._average_model is not None:
            self._swap_models(pl_module)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._average_model is not None:
            self._swap_models(pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {"latest_update_step": self._latest_update_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_step = state_dict["latest_update_step"]

    def on_save_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            log.info(
                "You're using the WeightAveraging callback, but saving a checkpoint outside the 'fit' stage. The state "
                "of the WeightAveraging callback won't be saved in the checkpoint. If training has finished, the "
                "average model parameters will be saved to the state_dict in the checkpoint."
            )
            return
        state = self._average_model.state_dict()
        checkpoint["current_model_state"] = checkpoint["state_dict"]
        checkpoint["state_dict"] = {k[len(_PREFIX) :]: v for k, v in state.items() if k.startswith(_PREFIX)}
        checkpoint["averaging_state"] = {k: v for k, v in state.items() if not k.startswith(_PREFIX)}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            warnings.warn(
                "You're using the WeightAveraging callback, but loading a checkpoint outside the 'fit' stage. The "
                "WeightAveraging state cannot be restored. If you're using the checkpoint for prediction or testing, "
                "you can ignore this warning. To disable the warning, remove the WeightAveraging callback.",
                stacklevel=2,
            )
        elif "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            log.info("Found current_model_state in the checkpoint. This will be used to initialize the model.")
            state = {_PREFIX + k: v for k, v in checkpoint["state_dict"].items()} | checkpoint["averaging_state"]
            self._average_model.load_state_dict(state)
            # the module was loaded from "state_dict" (the average) before this hook: give it its live weights
            pl_module.load_state_dict(checkpoint["current_model_state"])
        else:
            warnings.warn(
                "The checkpoint was not created with WeightAveraging. Both the current and the average model will be "
                "initialized with state_dict.",
                stacklevel=2,
            )
            self._average_model.module.load_state_dict(deepcopy(checkpoint["state_dict"]), strict=False)

    # ---- weights ------------------------------------------------------------------------------------------
    @staticmethod
    def _tensors(module: torch.nn.Module) -> itertools.chain[torch.Tensor]:
        return itertools.chain(module.parameters(), module.buffers())

    def _copy_average_to_current(self, pl_module: Module) -> None:
        """The module takes the averaged values (the end of training)."""
        assert self._average_model is not None
        for average, current in zip(self._tensors(self._average_model.module), self._tensors(pl_module)):
            current.data.copy_(average.data)

    def _swap_models(self, pl_module: Module) -> None:
        """Exchange the live and the averaged values (validation sees the average, training resumes its own)."""
        assert self._average_model is not None
        for average, current in zip(self._tensors(self._average_model.module), self._tensors(pl_module)):
            held = average.data.clone()
            average.data.copy_(current.data)
            current.data.copy_(held)


def _base_configure_model() -> Any:
    from trainer.module import Module

    return Module.configure_model


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average with ``decay``, updated every ``update_every_n_steps`` optimizer steps from
    step ``update_starting_at_step`` (None: the first); ``update_starting_at_epoch`` also updates after each epoch
    from that one."""

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMAWeightAveraging(decay={decay!r}): decay must be between 0 and 1.")
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        start_epoch = self.update_starting_at_epoch
        return epoch_idx is not None and start_epoch is not None and epoch_idx >= start_epoch
