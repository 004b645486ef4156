"""``StochasticWeightAveraging``: average the weights of the last epochs, with ``torch.optim.swa_utils``.

Lightning's options and timing. From epoch ``swa_epoch_start`` on, ``SWALR`` anneals each group's
learning rate to ``swa_lrs`` and pauses the module's own scheduler, and at the start of each
epoch up to the last the weights join an ``AveragedModel``. When training reaches
``max_epochs`` the module gets the averaged weights, and ``update_bn`` recomputes BatchNorm
statistics for them with one pass over the training data. The average, its count and the SWALR
state ride in checkpoints; the paused scheduler's slot keeps the module scheduler's own state.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

AvgFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | int], torch.Tensor]


class _Weights(nn.Module):
    """A module's parameters alone: ``AveragedModel`` deep-copies what it is given, and a ``Module`` refers to
    its Trainer, which must not be copied."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.params = nn.ParameterList(module.parameters())


class _Paused:
    """The module's scheduler while SWALR sets the learning rate: ``step`` does nothing, and everything
    else (its state in checkpoints, its optimizer) is the scheduler's own."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["scheduler"], name)


class StochasticWeightAveraging(Callback):
    """Average the weights of the epochs from ``swa_epoch_start`` (an epoch number counted from 1, or a
    fraction of ``max_epochs``) to the last; one optimizer and at most one scheduler.

    ``swa_lrs`` is one learning rate for every group or one per group; ``annealing_epochs`` and
    ``annealing_strategy`` ("cos" or "linear") say how SWALR gets there. ``avg_fn(averaged, current,
    n)`` replaces the equal-weight mean; ``device`` holds the average (None: the module's device).
    The module must have a ``forward`` that takes a batch's first element when it has BatchNorm
    layers (``update_bn`` calls it), where Lightning runs one more training epoch without steps.
    """

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: Literal["cos", "linear"] = "cos",
        avg_fn: AvgFn | None = None,
        device: torch.device | str | None = "cpu",  # Lightning: torch.device("cpu"); a str serializes in CLI configs
    ) -> None:
        _check_arguments(swa_lrs, swa_epoch_start, annealing_strategy, avg_fn, device)
        self._swa_lrs = swa_lrs
        self._swa_epoch_start = swa_epoch_start
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn
        self._device = device
        self._start = 0  # 0-based first epoch averaged, set at fit start
        self._max_epochs: int | None = None
        self._average: AveragedModel | None = None
        self._live: _Weights | None = None
        self._swa_scheduler: SWALR | None = None
        self._latest_update_epoch = -1
        self._saved: dict[str, Any] | None = None  # a checkpoint's state, applied when SWA starts again

    @property
    def swa_start(self) -> int:
        """The first epoch (0-based) whose starting weights are averaged."""
        return self._start

    @property
    def swa_end(self) -> float:
        """The last epoch (0-based) whose starting weights are averaged; infinite without ``max_epochs``."""
        return float("inf") if self._max_epochs is None else self._max_epochs - 1

    @property
    def n_averaged(self) -> int:
        return 0 if self._average is None else int(self._average.n_averaged)

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in pl_module.modules())

    # ---- hooks --------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationException(
                f"StochasticWeightAveraging works with one optimizer; got {len(trainer.optimizers)}."
            )
        if len(trainer.lr_scheduler_configs) > 1:
            raise MisconfigurationException(
                f"StochasticWeightAveraging replaces at most one LR scheduler; got {len(trainer.lr_scheduler_configs)}."
            )
        self._max_epochs = None if trainer.max_epochs == -1 else trainer.max_epochs  # -1: no epoch limit
        self._start = _start_epoch(self._swa_epoch_start, self._max_epochs)
        if self._saved is None:  # a new run (not resumed): nothing of an earlier fit carries over
            self._average = self._live = self._swa_scheduler = None
            self._latest_update_epoch = -1
        if self.pl_module_contains_batch_norm(pl_module) and type(pl_module).forward is nn.Module.forward:
            raise TypeError(
                f"{type(pl_module).__name__} has BatchNorm layers, so StochasticWeightAveraging recomputes their "
                "statistics for the averaged weights with module(batch[0]); define forward() for that."
            )

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        """A run resumed while averaging (possibly mid-epoch, where no epoch-start hook runs) starts again."""
        if self._saved is not None and self._saved["scheduler_state"] is not None:
            self._begin(trainer, pl_module)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        epoch = trainer.current_epoch
        if not self.swa_start <= epoch <= self.swa_end:
            return
        if self._swa_scheduler is None:
            self._begin(trainer, pl_module)
        if epoch > self._latest_update_epoch:
            assert self._average is not None and self._live is not None
            self._average.update_parameters(self._live)
            self._latest_update_epoch = epoch

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """SWALR steps once per epoch that ran to its end, as an epoch-interval scheduler does."""
        if self._swa_scheduler is not None and trainer.fit_loop.progress.epoch_finished:
            with (
                warnings.catch_warnings()
            ):  # after a resume at the epoch's end the epoch's steps ran in the old process
                warnings.filterwarnings("ignore", re.escape("Detected call of `lr_scheduler.step()` before"))
                self._swa_scheduler.step()

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Training reached its last epoch: the module takes the average (Lightning's rule: not after an
        early stop, always without ``max_epochs``)."""
        if self._average is None or (self._max_epochs is not None and trainer.current_epoch - 1 != self.swa_end):
            return
        self.transfer_weights(self._average.module, pl_module)
        if self.pl_module_contains_batch_norm(pl_module):
            update_bn(_inputs(trainer), pl_module)

    # ---- averaging ----------------------------------------------------------------------------------
    def _begin(self, trainer: Trainer, pl_module: Module) -> None:
        """Start averaging: the average, SWALR, the module's scheduler paused; a checkpoint's state if resumed."""
        saved, self._saved = self._saved, None
        self._live = _Weights(pl_module)
        device = torch.device(self._device) if self._device is not None else pl_module.device
        self._average = AveragedModel(self._live, device=device, avg_fn=self._avg_fn)
        optimizer = trainer.optimizers[0]
        swa_lrs = self._swa_lrs if isinstance(self._swa_lrs, list) else [self._swa_lrs] * len(optimizer.param_groups)
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=swa_lrs,  # type: ignore[arg-type]  # one per group, which SWALR accepts
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,
        )
        for config in trainer.lr_scheduler_configs:
            if not isinstance(config.scheduler, _Paused):
                config.scheduler = _Paused(config.scheduler)
        if saved is not None:
            self._latest_update_epoch = saved["latest_update_epoch"]
            if saved["average_model_state"] is not None:
                self._average.load_state_dict(saved["average_model_state"])
            if saved["scheduler_state"] is not None:
                self._swa_scheduler.load_state_dict(saved["scheduler_state"])

    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        """Copy ``src``'s parameters into ``dst``'s, in order, onto ``dst``'s devices."""
        for src, dst in zip(src_pl_module.parameters(), dst_pl_module.parameters()):
            dst.detach().copy_(src.to(dst.device))

    # ---- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._saved is not None:  # loaded but not started yet: keep it as it came
            return dict(self._saved)
        return {
            "n_averaged": self.n_averaged,
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average is None else self._average.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved = dict(state_dict)
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._average = self._live = self._swa_scheduler = None


def _inputs(trainer: Trainer) -> Iterator[Any]:
    """The training batches of one epoch on the device (``update_bn`` passes each one's first element)."""
    loader = trainer.train_dataloader
    assert loader is not None
    limit = trainer.num_training_batches
    for index, batch in enumerate(loader):
        if index >= limit:
            return
        yield trainer.strategy.batch_to_device(batch)


def _start_epoch(swa_epoch_start: int | float, max_epochs: int | None) -> int:
    """The 0-based first averaged epoch: ``swa_epoch_start - 1``, a fraction being of ``max_epochs``."""
    if isinstance(swa_epoch_start, float):
        if max_epochs is None:
            raise MisconfigurationException(
                f"StochasticWeightAveraging(swa_epoch_start={swa_epoch_start}) is a fraction of max_epochs, which is "
                "not set; give the epoch as an int."
            )
        swa_epoch_start = int(max_epochs * swa_epoch_start)
    return max(swa_epoch_start - 1, 0)


def _check_arguments(swa_lrs: Any, swa_epoch_start: Any, annealing_strategy: str, avg_fn: Any, device: Any) -> None:
    if isinstance(swa_epoch_start, bool) or not (
        (isinstance(swa_epoch_start, int) and swa_epoch_start >= 1)
        or (isinstance(swa_epoch_start, float) and 0 <= swa_epoch_start <= 1)
    ):
        raise MisconfigurationException(
            f"swa_epoch_start={swa_epoch_start!r}: give an epoch >= 1 or a fraction between 0 and 1."
        )
    lrs = swa_lrs if isinstance(swa_lrs, list) else [swa_lrs]
    if not lrs or not all(isinstance(lr, float) and lr > 0 for lr in lrs):
        raise MisconfigurationException(
            f"swa_lrs={swa_lrs!r}: give a positive float, or a list of them (one per parameter group)."
        )
    if annealing_strategy not in ("cos", "linear"):
        raise MisconfigurationException(f"annealing_strategy={annealing_strategy!r}: choose 'cos' or 'linear'.")
    if avg_fn is not None and not callable(avg_fn):
        raise TypeError(f"avg_fn must be callable; got {type(avg_fn).__name__}.")
    if device is not None and not isinstance(device, torch.device | str):
        raise TypeError(f"device must be a torch.device or a str; got {type(device).__name__}.")
