"""``Trainer``: checks the flags, then runs fit/validate/test/predict through a Strategy.

Nothing here knows about devices or processes (the Strategy does) or about how a loop runs
(``trainer.loops``). The loops own what they change (``fit_loop.progress``, the optimizers, the
data); the Trainer shows it read-only, with Lightning's names.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

import trainer.flags as flags
from trainer.accelerators import Accelerator, accelerator_for, select_strategy
from trainer.callbacks import EarlyStopping, ModelCheckpoint, ProgressBar
from trainer.callbacks.base import Callback
from trainer.callbacks.defaults import checkpointing_last, with_defaults
from trainer.claims import refuse_url
from trainer.data.combined import CombinedBatches
from trainer.loggers.base import Logger
from trainer.loggers.build import build_loggers
from trainer.loggers.dummy import DummyLogger
from trainer.loggers.logger_folder import logger_folder, logger_log_dir
from trainer.loops.evaluation import EvaluationLoop
from trainer.loops.fit import FitLoop
from trainer.metric_log import MetricLog
from trainer.plugins.flag import read_plugins
from trainer.plugins.flag import requeue_signal as plugged_requeue_signal
from trainer.precision import Precision, build_precision
from trainer.profilers import Profiler, build_profiler
from trainer.states import TrainerState
from trainer.strategies.base import Strategy

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from trainer.datamodule import DataModule
    from trainer.module import Module
    from trainer.optim import SchedulerConfig


class Trainer:
    """Runs a ``Module``: ``Trainer(max_epochs=3).fit(module, train_loader, val_loader)``."""

    @flags.from_environment
    def __init__(
        self,
        accelerator: str | Accelerator = "auto",
        devices: int | str | list[int] = "auto",
        strategy: str | Strategy = "auto",
        num_nodes: int = 1,
        precision: str | int | Precision | None = None,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
        val_check_interval: int | float | str | timedelta | dict[str, int] | None = None,
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        fast_dev_run: bool | int = False,
        overfit_batches: int | float = 0.0,
        reload_dataloaders_every_n_epochs: int = 0,
        inference_mode: bool = True,
        deterministic: bool | Literal["warn"] | None = None,
        benchmark: bool | None = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        plugins: Any = None,
        sync_batchnorm: bool = False,
        profiler: str | Profiler | None = None,
        default_root_dir: str | os.PathLike[str] | None = None,
        logger: bool | Logger | Iterable[Logger] | None = None,
        callbacks: Callback | Iterable[Callback] | None = None,
        enable_progress_bar: bool | None = None,
        enable_checkpointing: bool | None = None,
        enable_model_summary: bool | None = None,
        max_time: str | timedelta | dict[str, int] | None = None,
        on_nonfinite_loss: str = "raise",
        on_data_change: str = "raise",
        use_distributed_sampler: bool = True,
        compile: bool = False,
        cuda_graph: bool = False,
        seed: int = 0,
        requeue_signal: str | None = "SIGUSR1",
        collective_timeout: float | timedelta | None = None,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
    ) -> None:
        """Check every flag now, so a typo fails before any work starts.

        Args:
            accelerator: "auto" (CUDA, then MPS, then CPU), "cpu", "cuda", "gpu" or "mps".
            devices: how many devices (or processes on CPU), a list of indices, -1 for all, or "auto".
            strategy: "auto", "single", "single_device", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "dp",
                "fsdp", "fsdp_cpu_offload" (``trainer.strategies.STRATEGIES``; a "ddp" name may end in
                "_find_unused_parameters_true"), or a Strategy instance (e.g. DDPStrategy(...)).
            num_nodes: machines in a multi-node DDP job.
            precision: "32-true" (None: the default), "16-mixed" (fp16 autocast + GradScaler), "bf16-mixed",
                "16-true", "bf16-true", "64-true" (``trainer.precision.PRECISIONS``), or a Precision.
            max_epochs: stop after this many epochs (None: 1000 with a warning, or no limit with max_steps or
                max_time; -1: no limit).
            min_epochs: train at least this many epochs, even if early stopping asks to stop.
            max_steps: stop after this many optimizer steps (-1: no limit); may stop mid-epoch.
            min_steps: train at least this many optimizer steps, even if early stopping asks to stop.
            accumulate_grad_batches: micro-batches whose gradients are summed before a step.
            gradient_clip_val: clip gradients to this norm or value (None: no clipping).
            gradient_clip_algorithm: "norm" or "value" (None, kept as given as in Lightning: clip by norm).
            val_check_interval: validate every N training batches (int), this fraction of an epoch (float; default
                1.0: at the epoch end), or once this much time passed ("DD:HH:MM:SS", a timedelta or a dict such as
                {"minutes": 30}). With check_val_every_n_epoch=None an int counts across epochs.
            check_val_every_n_epoch: validate in every n-th epoch (None: by val_check_interval alone).
            limit_train_batches: batches per epoch: an int count or a fraction in [0, 1].
            limit_val_batches: batches per validation: an int count or a fraction in [0, 1].
            limit_test_batches: batches per test: an int count or a fraction in [0, 1].
            limit_predict_batches: batches per predict: an int count or a fraction in [0, 1].
            num_sanity_val_steps: validation batches run before training (-1: all, 0: none; None: 2).
            log_every_n_steps: how often per-step values reach the loggers (None: 50; 0: never, epoch values only).
            fast_dev_run: run 1 (True) or n batches of fit, validate, test and predict, to find bugs fast: no
                sanity check, no logging, no checkpoints, no early stopping.
            overfit_batches: train and validate on this many batches (an int, or a fraction of the training
                loader), unshuffled, to check that the model can fit them.
            reload_dataloaders_every_n_epochs: ask the module or DataModule for new loaders every n epochs.
            inference_mode: evaluate under torch.inference_mode (else torch.no_grad).
            deterministic: PyTorch's deterministic algorithms: True (an op without one raises), "warn" (it warns),
                None or False (off).
            benchmark: torch.backends.cudnn.benchmark (None: leave it as it is).
            detect_anomaly: torch.autograd's anomaly detection during fit (slow; names the op that made a NaN).
            barebones: turn off everything that costs speed (checkpointing, loggers, progress bar, model summary,
                sanity check), to measure the loop itself; refuses them given on.
            plugins: Lightning's plug-ins (``trainer.plugins``): a ClusterEnvironment (e.g.
                SLURMEnvironment(auto_requeue=False)), a CheckpointIO (AsyncCheckpointIO()), a Precision, a
                LayerSync (TorchSyncBatchNorm()); one of each kind.
            sync_batchnorm: BatchNorm statistics over the global batch (strategy="ddp").
            profiler: "simple" (time per step and hook), "advanced" (cProfile per action), "pytorch"
                (torch.profiler with a Chrome trace in the run folder), a Profiler, or None.
            default_root_dir: folder for run folders (logs, checkpoints); None: the working directory, whose
                ``lightning_logs/version_N`` the default logger writes, as Lightning's.
            logger: True or None (the default: TensorBoard where tensorboard is installed, else CSV, in
                ``<default_root_dir>/lightning_logs``), False for none, or Logger instance(s).
            callbacks: extra callbacks (a ModelCheckpoint and a TQDMProgressBar are added if missing).
            enable_progress_bar: draw a progress bar on rank zero.
            enable_checkpointing: keep last.ckpt and the best checkpoints.
            enable_model_summary: print the module's layers and parameter counts when fit starts (a
                ModelSummary callback; pass your own ModelSummary(max_depth=...) to choose its depth).
            max_time: stop training after this long ("DD:HH:MM:SS", a timedelta or a dict such as
                {"hours": 12}); checked after every step, and carried over by a resume (a Timer callback).
            on_nonfinite_loss: "raise" (default), "skip" the batch, or "off" (no check).
            on_data_change: a mid-epoch resume whose training data changed (batch size, dataset length, ...)
                would skip or repeat samples: "raise" (default), or "restart_epoch" from its first batch.
            use_distributed_sampler: shard training data with a DistributedSampler under DDP.
            compile: apply torch.compile to the module (checkpoints stay portable).
            cuda_graph: capture the whole training step (zero_grad, training_step, backward, clipping, optimizer
                step) as one CUDA graph after a few eager steps, and replay it for every later batch: one launch
                per step instead of hundreds. One CUDA device; Python inside the step runs once (see "Faster than
                a raw loop: capturing the step" in the docs); what cannot be captured runs eagerly with a warning.
            seed: kept for checkpoints' data layout; shuffles follow ``seed_everything`` (a non-zero value warns).
            requeue_signal: extra signal that saves and exits like SIGTERM (SLURM requeue), or None.
            collective_timeout: seconds (or a timedelta) a collective waits for every rank before the job
                fails naming it (default 600: long enough for rank 0 to write a large checkpoint).
            enable_autolog_hparams: give the loggers the module's (and DataModule's) saved hyper-parameters when
                fit starts.
            model_registry: Lightning's model hub upload; not supported (None only).
        """
        flags.check_model_registry(model_registry)
        (
            logger,
            enable_checkpointing,
            enable_progress_bar,
            enable_model_summary,
            num_sanity_val_steps,
            log_every_n_steps,
        ) = flags.unset_flags(barebones, locals())
        self.barebones = barebones
        flags.check_counts(locals())
        flags.check_choices(locals())
        self.limits = flags.debug_limits(locals())  # by stage: "train", "validation", "test", "predict"
        self.val_check_interval = flags.check_val_check_interval(val_check_interval, check_val_every_n_epoch)
        timeout = flags.as_timedelta("collective_timeout", collective_timeout)
        given = read_plugins(plugins, precision, sync_batchnorm)
        self.strategy: Strategy = select_strategy(strategy, accelerator, devices, num_nodes, timeout, given)
        self.accelerator: Accelerator = accelerator_for(accelerator, self.strategy.root_device.type)
        self.precision_plugin: Precision = build_precision(given.precision or precision, self.strategy.root_device.type)
        self.strategy.connect_precision(self.precision_plugin)
        flags.apply_sync_batchnorm(self.strategy, sync_batchnorm)
        self.min_epochs = min_epochs
        self.max_steps = max_steps
        self.min_steps = min_steps
        self.accumulate_grad_batches = accumulate_grad_batches
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.num_sanity_val_steps: int | float = math.inf if num_sanity_val_steps == -1 else num_sanity_val_steps
        self.log_every_n_steps = log_every_n_steps
        self.fast_dev_run = True if fast_dev_run == 1 else fast_dev_run  # Lightning's: 1 reads as True
        self.overfit_batches = overfit_batches
        self.reload_dataloaders_every_n_epochs = reload_dataloaders_every_n_epochs
        self.inference_mode = inference_mode
        self.deterministic = flags.check_deterministic(deterministic)
        self.enable_autolog_hparams = enable_autolog_hparams
        self.detect_anomaly = detect_anomaly
        self.profiler = build_profiler(profiler)
        if benchmark is not None:
            torch.backends.cudnn.benchmark = benchmark
        if fast_dev_run:
            n = int(fast_dev_run)
            max_epochs, self.max_steps, self.num_sanity_val_steps = 1, n, 0
            self.val_check_interval, self.check_val_every_n_epoch = 1.0, 1
            print(f"steadytrain: fast_dev_run: {n} batch(es) of each stage; no logging, checkpoints or early stopping.")
        root = os.getcwd() if default_root_dir is None else os.fspath(default_root_dir)
        refuse_url(root, "Trainer's default_root_dir")  # normpath would turn it into a local folder "s3:"
        self.default_root_dir = os.path.normpath(os.path.expanduser(root))  # a str, as Lightning's
        self.on_nonfinite_loss = on_nonfinite_loss
        self.on_data_change = on_data_change
        self.use_distributed_sampler = use_distributed_sampler
        self.compile = compile
        self.cuda_graph = cuda_graph
        if cuda_graph is not False:  # refused now where it cannot run; imported only then (trainer.graphs)
            from trainer.graphs.checks import check_trainer

            check_trainer(self)
        self.seed = seed
        self.requeue_signal = plugged_requeue_signal(
            requeue_signal, given.cluster_environment or getattr(self.strategy, "cluster_environment", None)
        )
        self._loggers = build_loggers(logger, self.default_root_dir, bool(fast_dev_run))
        self.callbacks = with_defaults(
            callbacks, enable_progress_bar, enable_checkpointing, enable_model_summary, max_time
        )
        self.should_stop = False  # callbacks and modules may set it
        self.state = TrainerState()  # what runs now and what it loaded: changed only through its methods
        self.config: dict[str, Any] | None = None  # the resolved CLI config, when run from the CLI
        self.metric_log = MetricLog(self.strategy, self._loggers)  # the same list: the setters change it in place
        self.fit_loop: FitLoop = FitLoop(self, max_epochs)
        self.validate_loop = EvaluationLoop(self, "validation")
        self.test_loop = EvaluationLoop(self, "test")
        self.predict_loop = EvaluationLoop(self, "predict")
        self._module: Module | None = None
        self._datamodule: Any = None
        if deterministic:
            torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    # ---- the run's facts, read-only ----------------------------------------------------------
    @property
    def max_epochs(self) -> int | None:
        """The value given until a fit starts, then the limit that fit runs (1000 for None, -1: no limit)."""
        return self.fit_loop.max_epochs

    @property
    def current_epoch(self) -> int:
        return self.fit_loop.progress.epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps so far (in manual optimization, every optimizer's steps count)."""
        return self.fit_loop.progress.global_step

    @property
    def batches_done(self) -> int:
        """Training batches finished in the current epoch."""
        return self.fit_loop.progress.batches_done

    @property
    def ckpt_path(self) -> str | None:
        """What the last fit/validate/test/predict loaded (None: nothing), or the one set here, as Lightning's."""
        return self.state.ckpt_path

    @ckpt_path.setter
    def ckpt_path(self, path: str | os.PathLike[str] | None) -> None:
        """Lightning's: the stages that follow load ``path`` when called without ``ckpt_path``."""
        self.state.choose(path)

    @property
    def sanity_checking(self) -> bool:
        return self.state.stage == "sanity_check"

    @property
    def training(self) -> bool:
        return self.state.stage == "train"

    @property
    def validating(self) -> bool:
        return self.state.stage == "validate"

    @property
    def testing(self) -> bool:
        return self.state.stage == "test"

    @property
    def predicting(self) -> bool:
        return self.state.stage == "predict"

    @property
    def precision(self) -> str:
        """Lightning's string for the setting (``trainer.precision == "bf16-mixed"``); the plug-in that applies it
        is ``precision_plugin``."""
        return self.precision_plugin.name

    @property
    def lightning_module(self) -> Module:
        if self._module is None:
            raise RuntimeError("no module is attached: call fit/validate/test/predict first.")
        return self._module

    @property
    def module(self) -> Module | None:
        """The module of the current or last stage (``lightning_module`` in Lightning's words)."""
        return self._module

    @property
    def model(self) -> torch.nn.Module | None:
        """What forward runs through: the strategy's wrapper (DDP, DataParallel) or the module itself; None
        before any stage, as in Lightning."""
        return self.strategy.model if self.strategy.model is not None else self._module

    @property
    def datamodule(self) -> Any:
        return self._datamodule

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        return self.metric_log.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        return self.metric_log.logged_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return self.metric_log.progress_bar_metrics

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        optimization = self.fit_loop.optimization
        return list(optimization.optimizers) if optimization is not None else []

    @property
    def lr_scheduler_configs(self) -> list[SchedulerConfig]:
        optimization = self.fit_loop.optimization
        return list(optimization.lr_scheduler_configs) if optimization is not None else []

    @property
    def lr_schedulers(self) -> list[SchedulerConfig]:
        """``lr_scheduler_configs`` by its name in steadytrain 0.1."""
        return self.lr_scheduler_configs

    @property
    def train_dataloader(self) -> Iterable[Any] | None:
        """The training loader this rank iterates (sharded under DDP); several as given (a dict or list)."""
        loader = self.fit_loop.train_dataloader
        return loader.combined.iterables if isinstance(loader, CombinedBatches) else loader

    @property
    def val_dataloaders(self) -> Any:
        """The validation loader(s) of the last fit or validate, in the shape given (one, a list or a dict)."""
        loop = self.validate_loop if self.state.fn == "validate" else self.fit_loop.val_loop
        return loop.given if loop.loaders else (self.fit_loop.val_loop.given or self.validate_loop.given)

    @property
    def is_last_batch(self) -> bool:
        """Whether the training batch being run is the last of its epoch."""
        return self.fit_loop.is_last_batch

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the whole fit takes (``max_steps``, epochs x batches / accumulation), as Lightning
        counts them; for schedulers such as OneCycleLR built in ``configure_optimizers``."""
        return self.fit_loop.estimated_stepping_batches()

    @property
    def num_training_batches(self) -> int | float:
        return self.fit_loop.num_training_batches

    @property
    def num_val_batches(self) -> list[int | float]:
        return (self.validate_loop if self.state.fn == "validate" else self.fit_loop.val_loop).num_batches

    @property
    def last_loss(self) -> torch.Tensor | None:
        """The last training step's loss, detached."""
        step = self.fit_loop.step
        loss = getattr(step, "step_loss", None)
        return None if loss is None else loss.detach()

    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def num_nodes(self) -> int:
        return self.strategy.num_nodes

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def loggers(self) -> list[Logger]:
        return self._loggers

    @loggers.setter
    def loggers(self, loggers: Iterable[Logger] | None) -> None:
        """Lightning's ``trainer.loggers = [...]`` (None or [] for none)."""
        self._loggers[:] = list(loggers or [])

    @property
    def logger(self) -> Logger | None:
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, logger: Logger | None) -> None:
        """Lightning's ``trainer.logger = ...``: the one logger, or none."""
        self.loggers = [logger] if logger else []

    @property
    def log_dir(self) -> str | None:
        """Folder of this run: the first logger's ``log_dir``, else its ``save_dir`` (a logger of the user's without
        a ``log_dir``, as Lightning reads it), else ``default_root_dir`` (a str, as Lightning's); None under
        ``fast_dev_run`` (its DummyLogger has no folder), as Lightning's."""
        if self.loggers and isinstance(self.loggers[0], DummyLogger):
            return None
        return next(map(logger_log_dir, self.loggers), None) or self.run_folder

    @property
    def run_folder(self) -> str:
        """Where this run's files go: the first logger's folder, else ``default_root_dir``."""
        folders = (logger_folder(lg) for lg in self.loggers)
        return next((folder for folder in folders if folder is not None), self.default_root_dir)

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints go: the ModelCheckpoint's folder, else ``<log_dir>/checkpoints``."""
        callback = self.checkpoint_callback
        if callback is not None and callback.dirpath:
            return Path(callback.dirpath)
        return Path(self.run_folder) / "checkpoints"

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        """The ProgressBar, or None (``enable_progress_bar=False``)."""
        return next((cb for cb in self.callbacks if isinstance(cb, ProgressBar)), None)

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        """The first ModelCheckpoint, or None."""
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        return next(iter(self.early_stopping_callbacks), None)

    # ---- Lightning's names for the devices, the flags and the stages' data, read-only -------------
    @property
    def node_rank(self) -> int:
        return int(getattr(self.strategy, "node_rank", 0))

    @property
    def device_ids(self) -> list[int]:
        """The device indices this machine's processes use (Lightning's ``devices=`` resolved)."""
        return list(self.strategy.device_indices)

    @property
    def num_devices(self) -> int:
        return len(self.device_ids)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """How loaders are sharded: ``num_replicas`` and ``rank`` with several processes, else None."""
        if self.world_size == 1 and self.strategy.name in ("single", "dp"):
            return None
        return self.strategy.distributed_sampler_kwargs

    @property
    def limit_train_batches(self) -> int | float | None:
        return self.limits["train"]

    @property
    def limit_val_batches(self) -> int | float | None:
        return self.limits["validation"]

    @property
    def limit_test_batches(self) -> int | float | None:
        return self.limits["test"]

    @property
    def limit_predict_batches(self) -> int | float | None:
        return self.limits["predict"]

    @property
    def enable_validation(self) -> bool:
        """Whether fit validates: a ``validation_step``, validation data and ``limit_val_batches`` above 0."""
        from trainer.module import written

        module = self._module
        return (
            module is not None
            and written(module, "validation_step")
            and bool(self.fit_loop.val_loop.loaders)
            and self.limits["validation"] != 0
        )

    @property
    def val_check_batch(self) -> int | float | None:
        """Training batches between validations in this fit (inf: at the end of the data; None: time-based)."""
        if isinstance(self.val_check_interval, timedelta):
            return None
        return self.fit_loop.validation.check_batch

    @property
    def evaluating(self) -> bool:
        return self.state.stage in ("validate", "test", "sanity_check")

    @property
    def interrupted(self) -> bool:
        """The last stage ended by an exception (Ctrl-C included), as Lightning's ``TrainerStatus.INTERRUPTED``."""
        return self.state.status == "interrupted"

    @property
    def received_sigterm(self) -> bool:
        """A SIGTERM reached this fit (it saves ``interrupted.ckpt`` at the next step boundary and exits)."""
        return self.fit_loop.stop.received == "SIGTERM"

    @property
    def test_dataloaders(self) -> Any:
        return self.test_loop.given

    @property
    def predict_dataloaders(self) -> Any:
        return self.predict_loop.given

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        return [min(self.num_sanity_val_steps, n) for n in self.fit_loop.val_loop.num_batches]

    @property
    def num_test_batches(self) -> list[int | float]:
        return self.test_loop.num_batches

    @property
    def num_predict_batches(self) -> list[int | float]:
        return self.predict_loop.num_batches

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def scaler(self) -> Any:
        """The GradScaler of ``precision="16-mixed"``, else None."""
        return getattr(self.precision_plugin, "scaler", None)

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Build the module under this context: its tensors are made on the strategy's device, in the precision's
        dtype for the "-true" precisions. With ``empty_init=True`` under FSDP or ModelParallelStrategy they are made
        on the meta device (no memory): the strategy gives each rank its shards' memory once it has sharded them
        and runs each layer's ``reset_parameters()``, so a model larger than one process's memory can be built.
        (Elsewhere ``empty_init`` has no effect: weights are always initialised.)"""
        device = self.strategy.root_device if self.strategy.name == "single" else torch.device("cpu")
        if empty_init and self.strategy.builds_on_meta:
            device = torch.device("meta")
        half = self.precision_plugin.name in ("16-true", "bf16-true")
        dtype = getattr(self.precision_plugin, "dtype", None) if half else None
        before = torch.get_default_dtype()
        with device:
            if dtype is not None:
                torch.set_default_dtype(dtype)
            try:
                yield
            finally:
                torch.set_default_dtype(before)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each machine's first process only."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    # ---- what the loops ask of the Trainer ------------------------------------------------------
    def attach(self, module: Module, datamodule: Any, fn: str) -> None:
        """A stage starts: the module knows its Trainer, and the Trainer its module and data."""
        module.trainer = self  # type: ignore[assignment]
        if datamodule is not None:
            datamodule.trainer = self
        self._module = module
        self._datamodule = datamodule
        self.should_stop = False
        self.state.start(fn)

    def release(self, interrupted: bool = False) -> None:
        """A stage ended (``interrupted``: by an exception): drop what it no longer needs (graph heads, DataLoader
        worker processes)."""
        from trainer.data.loaders import shut_down_workers

        self.fit_loop.release()
        shut_down_workers([self.fit_loop.data.loader, *self.fit_loop.val_loop.loaders])
        shut_down_workers([*self.validate_loop.loaders, *self.test_loop.loaders, *self.predict_loop.loaders])
        self.state.end(interrupted)

    def set_callbacks(self, callbacks: list[Callback]) -> None:
        self.callbacks = checkpointing_last(callbacks)

    def _launch(self, fn: str, function: Any, *args: Any, module: Module | None, datamodule: Any) -> Any:
        """Run a stage (``function(*args)``): here, or on the ranks a ddp_spawn/ddp_fork launcher starts, whose rank 0
        hands back the results, weights and state; their failure is reported here too, as Lightning does."""
        from trainer.loops.lifecycle import report_spawned_failure

        if self.strategy.launcher is None:
            return function(*args)
        try:
            return self.strategy.launch(self, function, *args, module=module, datamodule=datamodule)
        except BaseException as exc:
            report_spawned_failure(self, module, datamodule, fn, exc)
            raise

    # ---- entry points --------------------------------------------------------------------
    def fit(
        self,
        model: Module,
        train_dataloaders: DataLoader[Any] | Iterable[Any] | DataModule | None = None,
        val_dataloaders: DataLoader[Any] | Iterable[Any] | Sequence[Iterable[Any]] | None = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool | None = None,
    ) -> None:
        """Train ``model``; ``ckpt_path`` resumes exactly ("last" = newest complete checkpoint).

        Loaders are DataLoaders or any other iterable of batches (one rank, or sharded by you);
        a list or dict of val loaders means several loaders, not a list of batches. The checkpoint is read
        with ``torch.load(weights_only=True)`` unless ``weights_only=False`` (for a file you trust).
        """
        from trainer.data.resolve import is_datamodule

        if is_datamodule(train_dataloaders):
            datamodule, train_dataloaders = train_dataloaders, None  # type: ignore[assignment]
        self.state.read_with(weights_only)
        args = (model, train_dataloaders, val_dataloaders, datamodule, ckpt_path)
        self._launch("fit", self.fit_loop.run, *args, module=model, datamodule=datamodule)

    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        verbose: bool = True,
        datamodule: DataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over every sample once; returns each loader's epoch metrics."""
        return self._evaluate("validation", model, dataloaders, ckpt_path, verbose, datamodule, weights_only)

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        verbose: bool = True,
        datamodule: DataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over every sample once; returns each loader's epoch metrics."""
        return self._evaluate("test", model, dataloaders, ckpt_path, verbose, datamodule, weights_only)

    def _evaluate(
        self,
        stage: Literal["validation", "test"],
        model: Module | None,
        dataloaders: Any,
        ckpt_path: str | os.PathLike[str] | None,
        verbose: bool,
        datamodule: DataModule | None,
        weights_only: bool | None,
    ) -> list[dict[str, float]]:
        from trainer.loops.stages import evaluate

        self.state.read_with(weights_only)
        args = (self, stage, model, dataloaders, ckpt_path, verbose, datamodule)
        fn = "validate" if stage == "validation" else "test"
        results: list[dict[str, float]] = self._launch(fn, evaluate, *args, module=model, datamodule=datamodule)
        return results

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        return_predictions: bool | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool | None = None,
    ) -> list[Any] | None:
        """``predict_step`` outputs for this rank's share of the samples (one list per loader when
        several); None with ``return_predictions=False``."""
        from trainer.loops.stages import predict

        self.state.read_with(weights_only)
        args = (self, model, dataloaders, datamodule, return_predictions, ckpt_path)
        predictions: list[Any] | None = self._launch("predict", predict, *args, module=model, datamodule=datamodule)
        return predictions

    def save_checkpoint(
        self, filepath: str | os.PathLike[str], weights_only: bool = False, storage_options: Any = None
    ) -> None:
        """Collective: every rank must call it; global rank zero writes the file atomically.

        During fit a non-finite loss the accelerator has not reported yet is read first: the error
        comes before NaN weights could replace a good checkpoint.
        """
        from trainer.checkpoint.state import build_checkpoint

        refuse_url(filepath, "trainer.save_checkpoint's filepath")
        if self._module is None:
            raise AttributeError(
                "Saving a checkpoint is only possible if a model is attached to the Trainer: call "
                f"trainer.save_checkpoint({str(filepath)!r}) after fit/validate/test/predict."
            )
        if self.state.running_now and self.state.fn == "fit" and self.fit_loop.step is not None:
            self.fit_loop.step.check_nonfinite()
        checkpoint = build_checkpoint(self, weights_only)
        if storage_options is None:  # a Strategy subclass written for Lightning may take two arguments only
            self.strategy.save_checkpoint(checkpoint, Path(filepath))
        else:
            self.strategy.save_checkpoint(checkpoint, Path(filepath), storage_options=storage_options)
