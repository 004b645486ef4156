"""The fit loop. It calls the Strategy and Precision; it never branches on them."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from trainer import data
from trainer.data.resolve import resolve_loaders
from trainer.evaluation import evaluate
from trainer.results import Results
from trainer.run import call_hook, log_step_metrics, prepare_run
from trainer.signals import catch_stop_signals, start_iterator

SIGNAL_CHECK_EVERY = 8  # batches between the ranks' agreement on a received signal

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.trainer import Trainer


# ---- fit ---------------------------------------------------------------------------------
def run_fit(trainer: Trainer, module: Module, train: Any, val: Any, datamodule: Any, ckpt_path: Any) -> None:
    """Set up, restore if asked, sanity-check, then train epoch by epoch."""
    trainer.stage = "fit"
    with prepare_run(trainer, module, "fit") as run:
        from trainer.optim import parse_optimizers

        train_loader, val_loaders = resolve_loaders(
            trainer.strategy, trainer.use_distributed_sampler, module, "fit", train, val, datamodule
        )

        trainer.optimizers, trainer.lr_schedulers = parse_optimizers(module.configure_optimizers())
        trainer.train_dataloader = data.prepare_train_loader(
            train_loader,
            trainer.world_size,
            trainer.global_rank,
            trainer.seed,
            trainer.use_distributed_sampler,
        )
        trainer.val_dataloaders = [
            data.prepare_eval_loader(v, trainer.world_size, trainer.global_rank, trainer.use_distributed_sampler)
            for v in val_loaders
        ]
        trainer.num_training_batches = data.num_batches(trainer.train_dataloader, trainer.limits["train"])
        if trainer.num_training_batches == 0:
            raise ValueError("the training DataLoader yields no batches (empty dataset or limit_train_batches=0).")
        run.restore(ckpt_path)
        call_hook(trainer, "on_fit_start")
        if not run.resumed:
            _sanity_check(trainer)
        with catch_stop_signals(_stop_signal_names(trainer), functools.partial(_on_stop_signal, trainer)):
            _fit_epochs(trainer)
        if trainer.signal_received is not None:
            _save_and_exit(trainer)
        call_hook(trainer, "on_fit_end")


def _stop_signal_names(trainer: Trainer) -> list[str]:
    return ["SIGTERM", "SIGINT"] + ([trainer.requeue_signal] if trainer.requeue_signal else [])


def _on_stop_signal(trainer: Trainer, name: str) -> None:
    """SIGTERM/SIGUSR1 and a first Ctrl-C only set a flag: the loop finishes the step and saves.
    A second Ctrl-C raises KeyboardInterrupt at once."""
    if name == "SIGINT" and trainer.signal_received == "SIGINT":
        raise KeyboardInterrupt
    trainer.signal_received = name


def _save_and_exit(trainer: Trainer) -> None:
    """A signal stopped the loop at a step boundary: save ``interrupted.ckpt``, then leave.

    Ctrl-C re-raises KeyboardInterrupt; SIGTERM / the requeue signal end the process cleanly.
    """
    from trainer.state import save_trainer_checkpoint

    name = trainer.signal_received
    folder = trainer.checkpoint_dir
    path = folder / "interrupted.ckpt"
    save_trainer_checkpoint(trainer, path)
    if trainer.is_global_zero:
        print(
            f"steadytrain: {name} received; saved {path} at epoch {trainer.current_epoch}, step {trainer.global_step}.",
            flush=True,
        )
    if name == "SIGINT":
        raise KeyboardInterrupt
    raise SystemExit(0)


def _sanity_check(trainer: Trainer) -> None:
    """Run a few validation batches first, so a bug there shows before hours of training."""
    steps = trainer.num_sanity_val_steps
    if steps == 0 or not trainer.val_dataloaders:
        return
    trainer.sanity_checking = True
    try:
        evaluate(trainer, "validation", trainer.val_dataloaders, limit=None if steps < 0 else steps)
    finally:
        trainer.sanity_checking = False
        trainer.callback_metrics = {}


def _fit_epochs(trainer: Trainer) -> None:
    assert trainer.train_dataloader is not None
    while not trainer.should_stop and (trainer.max_epochs is None or trainer.current_epoch < trainer.max_epochs):
        if 0 <= trainer.max_steps <= trainer.global_step:
            break
        loader = trainer.train_dataloader
        skip = trainer.batches_done
        if skip == 0:
            _resume_rng_now(trainer)
            trainer.epoch_rng = data.capture_epoch_rng(loader)
        data.restore_epoch_rng(loader, trainer.epoch_rng)  # no-op unless resuming mid-epoch
        data.set_epoch(loader, trainer.current_epoch)
        completed = train_epoch(trainer, loader, skip)
        # A signal may have reached some ranks after their last agreement: decide together.
        if trainer.strategy.reduce_boolean_decision(trainer.signal_received is not None):
            trainer.signal_received = trainer.signal_received or "SIGTERM"
            break
        _end_epoch(trainer, completed)
        if not completed:  # max_steps or should_stop mid-epoch: the checkpoint stays mid-epoch
            break
        trainer.current_epoch += 1
        trainer.batches_done = 0


def _end_epoch(trainer: Trainer, completed: bool) -> None:
    """Validation, the module's on_train_epoch_end (what it logs counts for this epoch), epoch-level
    logging, epoch schedulers, then the callbacks' on_train_epoch_end (checkpoints)."""
    from trainer.run import log_epoch_metrics

    check_nonfinite(trainer)
    every = trainer.check_val_every_n_epoch
    if trainer.val_dataloaders and every is not None and (trainer.current_epoch + 1) % every == 0:
        evaluate(trainer, "validation", trainer.val_dataloaders, trainer.limits["validation"])
    module = trainer.module
    assert module is not None
    trainer.results.epoch_end = True  # self.log in the hook defaults to on_epoch, as in Lightning
    module.on_train_epoch_end()
    log_epoch_metrics(trainer, trainer.results, "train")
    for config in trainer.lr_schedulers:
        if config.interval == "epoch" and (trainer.current_epoch + 1) % config.frequency == 0:
            _step_scheduler(trainer, config)
    trainer.epoch_finished = completed
    for cb in trainer.callbacks:
        cb.on_train_epoch_end(trainer, module)
    trainer.epoch_finished = False


def train_epoch(trainer: Trainer, loader: Iterable[Any], skip: int) -> bool:
    """Train one epoch from batch ``skip`` (> 0 only when resuming mid-epoch).

    Returns whether the epoch ran to its end (False when a stop came mid-epoch).
    """
    module = trainer.module
    assert module is not None
    module.train()
    trainer.results = results = Results("train", trainer.strategy)
    if skip == 0:
        call_hook(trainer, "on_train_epoch_start")
    calls = _step_calls(trainer, module)
    # Several ranks agree on a stop every few batches (a collective each batch would cost time);
    # a single rank's own flag is the decision.
    agree = trainer.strategy.reduce_boolean_decision if trainer.world_size > 1 else None
    batches = _resumed_iterator(trainer, loader, skip) if skip else start_iterator(loader)
    limit = trainer.num_training_batches
    for batch_idx, batch in enumerate(batches, start=skip):
        if batch_idx >= limit:
            break
        _train_batch(trainer, calls, results, batch, batch_idx)
        stop = trainer.signal_received is not None
        if agree is not None:
            stop = batch_idx % SIGNAL_CHECK_EVERY == 0 and agree(stop)
        if stop:
            trainer.signal_received = trainer.signal_received or "SIGTERM"
            return False
        if trainer.should_stop:  # set by max_steps (in _optimizer_step), a callback or the module
            return batch_idx + 1 >= limit
    return True


@dataclass(frozen=True)
class _StepCalls:
    """What a training batch calls, looked up once per epoch; hooks nobody overrides are left out,
    so a plain run pays for none of them."""

    to_device: Callable[[Any], Any] | None  # None: batches are already where the step runs
    forward: Callable[[Any, int], Any]  # the strategy's training step, under the precision's autocast
    batch_start: tuple[Callable[[Any, int], None], ...]
    before_optimizer_step: tuple[Callable[[torch.optim.Optimizer], None], ...]
    batch_end: tuple[Callable[[Any, Any, int], None], ...]


def _step_calls(trainer: Trainer, module: Module) -> _StepCalls:
    from trainer.callbacks.base import Callback
    from trainer.module import Module
    from trainer.precision import Precision

    def hooks(name: str) -> tuple[Callable[..., None], ...]:
        own = (getattr(module, name),) if overrides(module, name, Module) else ()
        bound = (functools.partial(getattr(cb, name), trainer, module) for cb in trainer.callbacks)
        return own + tuple(hook for hook, cb in zip(bound, trainer.callbacks) if overrides(cb, name, Callback))

    precision = trainer.precision
    # Unscaling comes first, so the hooks and clipping see the true gradients.
    unscale = (precision.unscale_,) if overrides(precision, "unscale_", Precision) else ()
    return _StepCalls(
        to_device=trainer.strategy.batch_mover(),
        forward=precision.autocast(trainer.strategy.step_function("training")),
        batch_start=hooks("on_train_batch_start"),
        before_optimizer_step=unscale + hooks("on_before_optimizer_step"),
        batch_end=hooks("on_train_batch_end"),
    )


def overrides(obj: object, name: str, base: type) -> bool:
    """Whether ``obj`` replaces ``base``'s no-op hook ``name`` (in its class or on the instance)."""
    impl = getattr(obj, name)
    return getattr(impl, "__func__", impl) is not getattr(base, name)


def _resume_rng_now(trainer: Trainer) -> None:
    if trainer.resume_rng is not None:
        from trainer.seed import set_rng_state

        set_rng_state(trainer.resume_rng)
        trainer.resume_rng = None


def _resumed_iterator(trainer: Trainer, loader: Iterable[Any], skip: int) -> Iterator[Any]:
    """Skip finished batches at the index level, then continue the checkpoint's RNG stream."""
    iterator = start_iterator(data.skip_batches(loader, skip))
    _resume_rng_now(trainer)
    return iterator


def _train_batch(trainer: Trainer, calls: _StepCalls, results: Results, batch: Any, batch_idx: int) -> None:
    if calls.to_device is not None:
        batch = calls.to_device(batch)
    results.batch = batch
    for hook in calls.batch_start:
        hook(batch, batch_idx)
    should_step = trainer.accumulate_grad_batches == 1 or _window_size(trainer, batch_idx) == 0
    if should_step:
        output, loss = _forward_backward(trainer, calls, batch, batch_idx)
        _optimizer_step(trainer, calls)
    else:
        with trainer.strategy.no_sync():  # DDP: no gradient all-reduce until the window closes
            output, loss = _forward_backward(trainer, calls, batch, batch_idx)
    trainer.batches_done = batch_idx + 1
    # The last loss keeps its graph head until the next step, as a hand-written loop's ``loss``
    # does: autograd then reuses each parameter's gradient accumulator instead of rebuilding it.
    trainer.step_loss = loss
    if should_step:  # callbacks see every step's values; loggers get them every log_every_n_steps
        write = trainer.global_step % trainer.log_every_n_steps == 0
        if write:
            check_nonfinite(trainer)
        if results.step_values or (write and results.unwritten):
            log_step_metrics(trainer, results, write)
    for end_hook in calls.batch_end:
        end_hook(output, batch, batch_idx)
    results.batch = None  # let the allocator reuse this batch's memory for the next one


def _forward_backward(trainer: Trainer, calls: _StepCalls, batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor]:
    """Run the step and backpropagate its loss; returns the step's output and the loss.

    The output is only validated when something fails: ``_check_loss`` then names the problem
    (a checked-up-front loss would cost every step a few attribute reads).
    """
    output = calls.forward(batch, batch_idx)
    try:
        loss = output["loss"] if isinstance(output, dict) else output
        if trainer.on_nonfinite_loss != "off" and not _finite(trainer, loss):
            return output, loss.detach()  # skipped: drop the graph at once
        accumulate = trainer.accumulate_grad_batches
        trainer.precision.backward(loss if accumulate == 1 else loss / _divisor(trainer, batch_idx))
    except Exception:
        _check_loss(output, trainer.global_step)
        raise
    return output, loss


def _window_size(trainer: Trainer, batch_idx: int) -> int:
    """0 when this micro-batch closes an accumulation window, else the batches still to come."""
    accumulate = trainer.accumulate_grad_batches
    if accumulate == 1:
        return 0
    total = trainer.num_training_batches
    if (batch_idx + 1) % accumulate == 0 or batch_idx + 1 >= total:
        return 0
    return accumulate - (batch_idx + 1) % accumulate


def _divisor(trainer: Trainer, batch_idx: int) -> float:
    """Micro-batches in this window: a last partial window averages over what it has."""
    accumulate = trainer.accumulate_grad_batches
    start = batch_idx - batch_idx % accumulate
    total = trainer.num_training_batches
    return float(min(accumulate, total - start)) if math.isfinite(total) else float(accumulate)


def _check_loss(output: Any, step: int) -> None:
    """Raise a clear error when ``output`` is not a usable loss (called after a step failed)."""
    loss = output.get("loss") if isinstance(output, dict) else output
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"training_step must return a loss tensor or a dict with 'loss'; got {type(output).__name__} "
            f"at global step {step}."
        )
    if loss.numel() != 1:
        raise ValueError(f"training_step returned a loss of shape {tuple(loss.shape)}; it must be a scalar.")
    if not loss.requires_grad:
        raise ValueError(
            "training_step returned a loss that does not require grad (was it computed under no_grad, or detached?)."
        )


def _finite(trainer: Trainer, loss: torch.Tensor) -> bool:
    """False when the batch must be skipped; raises under on_nonfinite_loss="raise".

    On CPU ``.item()`` is nearly free, so the check is immediate. On an accelerator a per-step
    ``.item()`` would stall the device, so "raise" keeps a device-side record of the first bad
    step and reads it at each logging interval and at the epoch end (see ``check_nonfinite``).
    """
    if not loss.is_cpu and trainer.on_nonfinite_loss == "raise":
        step = torch.tensor(trainer.global_step, device=loss.device)
        first = trainer.first_nonfinite_step
        bad = ~torch.isfinite(loss.detach())
        if first is None:
            trainer.first_nonfinite_step = torch.where(bad, step, torch.full_like(step, -1))
        else:
            trainer.first_nonfinite_step = torch.where(bad & (first < 0), step, first)
        return True
    if math.isfinite(loss.item()):
        return True
    if trainer.on_nonfinite_loss == "raise":
        _raise_nonfinite(trainer, trainer.global_step, loss.item())
    return False


def _raise_nonfinite(trainer: Trainer, step: int, value: float | None = None) -> None:
    shown = f" ({value})" if value is not None else ""
    raise FloatingPointError(
        f"training_step returned a non-finite loss{shown} at epoch {trainer.current_epoch}, "
        f"global step {step}; pass on_nonfinite_loss='skip' to skip such batches."
    )


def check_nonfinite(trainer: Trainer) -> None:
    """Read the deferred device-side record (one sync) and raise if a loss was not finite."""
    first = trainer.first_nonfinite_step
    if first is not None and (step := int(first)) >= 0:
        _raise_nonfinite(trainer, step)


def _optimizer_step(trainer: Trainer, calls: _StepCalls) -> None:
    precision = trainer.precision
    for optimizer in trainer.optimizers:
        for hook in calls.before_optimizer_step:  # the precision's unscale_ first, when it has one
            hook(optimizer)
        if trainer.gradient_clip_val is not None:
            _clip(trainer, optimizer)
        precision.optimizer_step(optimizer)
    stepped = precision.update()
    for optimizer in trainer.optimizers:
        optimizer.zero_grad(set_to_none=True)
    trainer.global_step += 1
    if trainer.global_step == trainer.max_steps:
        trainer.should_stop = True
    if stepped:
        for config in trainer.lr_schedulers:
            if config.interval == "step" and trainer.global_step % config.frequency == 0:
                _step_scheduler(trainer, config)


def _clip(trainer: Trainer, optimizer: torch.optim.Optimizer) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    assert trainer.gradient_clip_val is not None
    if trainer.gradient_clip_algorithm == "norm":
        torch.nn.utils.clip_grad_norm_(params, trainer.gradient_clip_val)
    else:
        torch.nn.utils.clip_grad_value_(params, trainer.gradient_clip_val)


def _step_scheduler(trainer: Trainer, config: Any) -> None:
    if not config.needs_metric:
        config.scheduler.step()
        return
    value = trainer.callback_metrics.get(config.monitor)
    if value is None:
        if trainer.sanity_checking:
            return
        raise KeyError(
            f"ReduceLROnPlateau monitors {config.monitor!r}, which was not logged; logged: "
            f"{sorted(trainer.callback_metrics) or 'nothing'}."
        )
    config.scheduler.step(float(value))
