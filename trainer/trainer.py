"""``Trainer``: checks the flags, then runs fit/validate/test/predict through a Strategy.

Nothing here knows about devices or processes: the Strategy does. The loops live in
``trainer.loops`` and ``trainer.evaluation``; what a checkpoint holds lives in ``trainer.state``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.accelerators import select_strategy
from trainer.callbacks.base import Callback
from trainer.loggers.base import Logger
from trainer.precision import Precision, build_precision
from trainer.results import Results
from trainer.strategies.base import Strategy

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from trainer.datamodule import DataModule
    from trainer.module import Module
    from trainer.optim import SchedulerConfig

_NONFINITE = ("raise", "skip", "off")
_CLIP = ("norm", "value")


def _check_limit(name: str, value: int | float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name}={value!r} must be None, a batch count >= 0, or a fraction in [0, 1].")
    if isinstance(value, float) and value > 1.0:
        raise ValueError(f"{name}={value!r}: a float is a fraction in [0, 1]; use an int for a batch count.")


def _as_timedelta(name: str, value: float | timedelta | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        seconds = None if value is None else value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}={value!r} must be a number of seconds or a datetime.timedelta.")
    else:
        seconds = float(value)
    if seconds is not None and seconds <= 0:
        raise ValueError(f"{name}={value!r} must be positive.")
    return None if seconds is None else timedelta(seconds=seconds)


class Trainer:
    """Runs a ``Module``: ``Trainer(max_epochs=3).fit(module, train_loader, val_loader)``."""

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int | str | list[int] = "auto",
        strategy: str | Strategy = "auto",
        num_nodes: int = 1,
        precision: str | int | Precision = "32-true",
        max_epochs: int | None = None,
        max_steps: int = -1,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        num_sanity_val_steps: int = 2,
        log_every_n_steps: int = 50,
        deterministic: bool = False,
        default_root_dir: str | os.PathLike[str] = "runs",
        logger: bool | Logger | Iterable[Logger] = True,
        callbacks: Callback | Iterable[Callback] | None = None,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        on_nonfinite_loss: str = "raise",
        use_distributed_sampler: bool = True,
        compile: bool = False,
        seed: int = 0,
        requeue_signal: str | None = "SIGUSR1",
        collective_timeout: float | timedelta | None = None,
    ) -> None:
        """Check every flag now, so a typo fails before any work starts.

        Args:
            accelerator: "auto" (CUDA, then MPS, then CPU), "cpu", "cuda", "gpu" or "mps".
            devices: how many devices (or processes on CPU), a list of indices, -1 for all, or "auto".
            strategy: "auto", "single", "dp", "ddp", or a Strategy instance (e.g. DDPStrategy(...)).
            num_nodes: machines in a multi-node DDP job.
            precision: "32-true", "16-mixed" (fp16 autocast + GradScaler), "bf16-mixed", or a Precision.
            max_epochs: stop after this many epochs (default 1000 unless max_steps is set).
            max_steps: stop after this many optimizer steps (-1: no limit); may stop mid-epoch.
            accumulate_grad_batches: micro-batches whose gradients are summed before a step.
            gradient_clip_val: clip gradients to this norm or value (None: no clipping).
            gradient_clip_algorithm: "norm" or "value".
            check_val_every_n_epoch: validate every n epochs (None: never during fit).
            limit_train_batches: batches per epoch: an int count or a fraction in [0, 1].
            limit_val_batches: batches per validation: an int count or a fraction in [0, 1].
            limit_test_batches: batches per test: an int count or a fraction in [0, 1].
            limit_predict_batches: batches per predict: an int count or a fraction in [0, 1].
            num_sanity_val_steps: validation batches run before training (-1: all, 0: none).
            log_every_n_steps: how often per-step values reach the loggers.
            deterministic: ask PyTorch for deterministic algorithms.
            default_root_dir: folder for run folders (logs, checkpoints).
            logger: True for the CSV logger, False for none, or Logger instance(s).
            callbacks: extra callbacks (a ModelCheckpoint and a ProgressBar are added if missing).
            enable_progress_bar: draw a progress bar on rank zero.
            enable_checkpointing: keep last.ckpt and the best checkpoints.
            on_nonfinite_loss: "raise" (default), "skip" the batch, or "off" (no check).
            use_distributed_sampler: shard training data with a DistributedSampler under DDP.
            compile: apply torch.compile to the module (checkpoints stay portable).
            seed: seed of the DistributedSampler's shuffle.
            requeue_signal: extra signal that saves and exits like SIGTERM (SLURM requeue), or None.
            collective_timeout: seconds (or a timedelta) a collective waits for every rank before the job
                fails naming it (default 600: long enough for rank 0 to write a large checkpoint).
        """
        if max_epochs is not None and max_epochs < 0:
            raise ValueError(f"max_epochs={max_epochs!r} must be >= 0 (or None for the default of 1000).")
        if max_steps < -1:
            raise ValueError(f"max_steps={max_steps!r} must be -1 (no limit) or >= 0.")
        if accumulate_grad_batches < 1:
            raise ValueError(f"accumulate_grad_batches={accumulate_grad_batches!r} must be >= 1.")
        if gradient_clip_algorithm not in _CLIP:
            raise ValueError(f"gradient_clip_algorithm={gradient_clip_algorithm!r}: choose one of {', '.join(_CLIP)}.")
        if gradient_clip_val is not None and gradient_clip_val <= 0:
            raise ValueError(f"gradient_clip_val={gradient_clip_val!r} must be > 0 or None.")
        if on_nonfinite_loss not in _NONFINITE:
            raise ValueError(f"on_nonfinite_loss={on_nonfinite_loss!r}: choose one of {', '.join(_NONFINITE)}.")
        if log_every_n_steps < 1:
            raise ValueError(f"log_every_n_steps={log_every_n_steps!r} must be >= 1.")
        if check_val_every_n_epoch is not None and check_val_every_n_epoch < 1:
            raise ValueError(f"check_val_every_n_epoch={check_val_every_n_epoch!r} must be >= 1 or None.")
        for name, value in (
            ("limit_train_batches", limit_train_batches),
            ("limit_val_batches", limit_val_batches),
            ("limit_test_batches", limit_test_batches),
            ("limit_predict_batches", limit_predict_batches),
        ):
            _check_limit(name, value)
        self.strategy: Strategy = select_strategy(
            strategy, accelerator, devices, num_nodes, _as_timedelta("collective_timeout", collective_timeout)
        )
        self.precision = build_precision(precision, self.strategy.root_device.type)
        self.max_epochs = 1000 if max_epochs is None and max_steps == -1 else max_epochs
        self.max_steps = max_steps
        self.accumulate_grad_batches = accumulate_grad_batches
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.limits = {
            "train": limit_train_batches,
            "validation": limit_val_batches,
            "test": limit_test_batches,
            "predict": limit_predict_batches,
        }
        self.num_sanity_val_steps = num_sanity_val_steps
        self.log_every_n_steps = log_every_n_steps
        self.deterministic = deterministic
        self.default_root_dir = Path(default_root_dir)
        self.on_nonfinite_loss = on_nonfinite_loss
        self.use_distributed_sampler = use_distributed_sampler
        self.compile = compile
        self.seed = seed
        self.requeue_signal = requeue_signal
        self.loggers = self._build_loggers(logger)
        self.callbacks = self._build_callbacks(callbacks, enable_progress_bar, enable_checkpointing)
        # Run state (what a checkpoint's "loop" section records).
        self.current_epoch = 0
        self.global_step = 0
        self.batches_done = 0  # batches of the current epoch already trained
        self.should_stop = False
        self.stage = "fit"
        self.sanity_checking = False
        self.results = Results(strategy=self.strategy)
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, float] = {}
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[SchedulerConfig] = []
        self.module: Module | None = None
        self.train_dataloader: Iterable[Any] | None = None  # a DataLoader, or the iterable given to fit()
        self.val_dataloaders: list[Iterable[Any]] = []
        self.num_training_batches: int | float = math.inf
        self.config: dict[str, Any] | None = None  # the resolved CLI config, when run from the CLI
        self.signal_received: str | None = None
        self.resume_rng: dict[str, Any] | None = None  # RNG to continue from after a resume
        self.epoch_rng: dict[str, Any] = {}  # RNG that ordered the current epoch
        self.epoch_finished = False
        self.step_loss: torch.Tensor | None = None  # the last training loss, graph head kept (see loops)
        self.first_nonfinite_step: torch.Tensor | None = None  # device-side, read at log intervals
        if deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    # ---- construction helpers ------------------------------------------------------------
    def _build_loggers(self, logger: bool | Logger | Iterable[Logger]) -> list[Logger]:
        if logger is True:
            from trainer.loggers.csv import CSVLogger

            return [CSVLogger(save_dir=str(self.default_root_dir))]
        if logger is False or logger is None:
            return []
        loggers = [logger] if isinstance(logger, Logger) else list(logger)
        bad = [type(lg).__name__ for lg in loggers if not isinstance(lg, Logger)]
        if bad:
            raise TypeError(f"logger= takes True/False, a Logger or a list of them; got {', '.join(bad)}.")
        return loggers

    def _build_callbacks(
        self, callbacks: Callback | Iterable[Callback] | None, progress: bool, checkpointing: bool
    ) -> list[Callback]:
        from trainer.callbacks import ModelCheckpoint, ProgressBar

        given = [] if callbacks is None else [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
        bad = [type(cb).__name__ for cb in given if not isinstance(cb, Callback)]
        if bad:
            raise TypeError(f"callbacks= takes Callback instances; got {', '.join(bad)}.")
        if checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in given):
            given.append(ModelCheckpoint())
        if not checkpointing and any(isinstance(cb, ModelCheckpoint) for cb in given):
            raise ValueError("enable_checkpointing=False contradicts the ModelCheckpoint in callbacks=.")
        if progress and not any(isinstance(cb, ProgressBar) for cb in given):
            given.append(ProgressBar())
        # Checkpointing runs last, so it sees what every other callback did in the same hook.
        return sorted(given, key=lambda cb: isinstance(cb, ModelCheckpoint))

    # ---- facts ---------------------------------------------------------------------------
    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def logger(self) -> Logger | None:
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> Path:
        """Folder of this run: the first logger's, else ``default_root_dir``."""
        for lg in self.loggers:
            if lg.log_dir is not None:
                return Path(lg.log_dir)
        return self.default_root_dir

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints go: the ModelCheckpoint's folder, else ``<log_dir>/checkpoints``."""
        callback = self.checkpoint_callback
        if callback is not None and callback.dirpath:
            return Path(callback.dirpath)
        return self.log_dir / "checkpoints"

    @property
    def checkpoint_callback(self) -> Any:
        from trainer.callbacks import ModelCheckpoint

        return next((cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)), None)

    @property
    def last_loss(self) -> torch.Tensor | None:
        """The last training step's loss, detached."""
        return None if self.step_loss is None else self.step_loss.detach()

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.callback_metrics.items() if k in self.results.prog_bar}

    # ---- entry points --------------------------------------------------------------------
    def fit(
        self,
        module: Module,
        train_dataloaders: DataLoader[Any] | Iterable[Any] | DataModule | None = None,
        val_dataloaders: DataLoader[Any] | Iterable[Any] | Sequence[Iterable[Any]] | None = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> None:
        """Train ``module``; ``ckpt_path`` resumes exactly ("last" = newest complete checkpoint).

        Loaders are DataLoaders or any other iterable of batches (one rank, or sharded by you);
        a list of val loaders means several loaders, not a list of batches.
        """
        from trainer.loops import run_fit

        run_fit(self, module, train_dataloaders, val_dataloaders, datamodule, ckpt_path)

    def validate(
        self,
        module: Module,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over every sample once; returns the epoch metrics."""
        from trainer.evaluation import run_evaluation

        return run_evaluation(self, "validation", module, dataloaders, datamodule, ckpt_path)

    def test(
        self,
        module: Module,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over every sample once; returns the epoch metrics."""
        from trainer.evaluation import run_evaluation

        return run_evaluation(self, "test", module, dataloaders, datamodule, ckpt_path)

    def predict(
        self,
        module: Module,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> list[Any]:
        """Return ``predict_step`` outputs (this rank's share of the samples under DDP)."""
        from trainer.evaluation import run_prediction

        return run_prediction(self, module, dataloaders, datamodule, ckpt_path)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Collective: every rank must call it; global rank zero writes the file atomically."""
        from trainer.state import save_trainer_checkpoint

        save_trainer_checkpoint(self, Path(path))
