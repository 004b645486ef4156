"""A fit's training data: where its loaders come from, when they are requested again, which
position a resume continues from, and the RNG that orders each epoch.

The fit loop asks one question of it, "the batches of epoch ``e``, from batch ``k``"
(:meth:`TrainSource.epoch_loader` then :meth:`TrainSource.batches`); everything a checkpoint
records of the data position (``data_state``, the data part of ``rank_state``) lives here too, so
what decides the position and what restores it are read in one place. It reads the fit loop's
position (``Position``) and never changes it: where the position must change (a resumed epoch whose
data changed starts over), it says so and the fit loop changes its counters.
"""

from __future__ import annotations

import functools
import math
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

import trainer.data.position as position
from trainer.data.combined import CombinedLoader, as_batches, map_loaders
from trainer.data.loaders import count_batches, num_batches, set_epoch, shut_down_workers
from trainer.data.resolve import LoaderSource
from trainer.data.resume import capture_epoch_rng, restore_epoch_rng, skip_batches, start_persistent_workers
from trainer.data.sample_seeds import seed_samples
from trainer.data.sharding import prepare_train_loader
from trainer.exceptions import MisconfigurationException
from trainer.seed import rng_state, set_rng_state
from trainer.signals import start_iterator
from trainer.user_warnings import PossibleUserWarning

if TYPE_CHECKING:
    from trainer.strategies.base import Strategy
    from trainer.view import TrainerView

TrainBatches = Callable[[int | float], None]  # the fit loop told each placed loader's number of batches


class Position(Protocol):
    """The fit loop's position, read-only here (its ``Progress``)."""

    @property
    def epoch(self) -> int: ...

    @property
    def batches_done(self) -> int: ...


class TrainSource:
    """The training loader of each epoch, placed (sharded, per-sample seeded) and positioned."""

    def __init__(self, trainer: TrainerView, progress: Position, use_train_batches: TrainBatches) -> None:
        self.trainer, self.progress, self.use_train_batches = trainer, progress, use_train_batches
        self.source: LoaderSource | None = None  # where the loaders come from, to request them again
        self.raw_train: Any = None  # the training loader as given, before sharding
        self.loader: Iterable[Any] | None = None  # the placed loader the epochs iterate
        self.num_batches: int | float = math.inf
        self.loader_epoch = 0  # the epoch whose start requested the current loaders
        self.loader_rng: dict[str, Any] | None = None  # the RNG that request started from (None: epoch 0's)
        self.saved_loader_rng: dict[str, Any] | None = None
        # The data position and what decides it (a checkpoint records them; see data_state/rank_state).
        self.data_seed = 0
        self.layout: dict[str, Any] = {}  # what the position in an epoch depends on (data.position)
        self.saved_layout: dict[str, Any] | None = None  # the resumed checkpoint's
        self.resumed_from: Path | None = None
        self.resharded: Iterable[Any] | None = None  # the interrupted epoch's rest, on another number of ranks
        self.epoch_rng: dict[str, Any] = {}  # RNG that ordered the current epoch
        self.resume_rng: dict[str, Any] | None = None  # RNG to continue from after a resume
        self._pending: Any = None  # the training loader requested, not placed yet
        self._first: tuple[Iterable[Any], Iterator[Any]] | None = None  # epoch 0's, started before on_train_start
        self.resume_started = False  # the checkpoint's epoch had its iterator, not a batch yet
        self.data_ended = False  # this epoch's loader (one without a length) ran out
        self.resumed_data_ended = False  # the checkpoint was saved after its epoch's loader ran out

    # ---- set-up --------------------------------------------------------------------------------------
    def setup(self, module: Any, train: Any, val: Any, datamodule: Any) -> None:
        """Where the loaders come from, checked; none is requested yet. Lightning's order: validation's by the
        sanity check, the training loader after it (:meth:`place`), or earlier where something needs it
        (:meth:`requested`, e.g. ``estimated_stepping_batches`` in ``configure_optimizers``)."""
        trainer = self.trainer
        self.source = LoaderSource(
            trainer.strategy,
            trainer.use_distributed_sampler,
            module,
            train,
            val,
            datamodule,
            bool(trainer.overfit_batches),
        )
        self._check_reload_source()
        if self.source.validation_warning is not None and trainer.is_global_zero:
            message, category = self.source.validation_warning
            warnings.warn(message, category, stacklevel=5)
        if trainer.seed:
            warnings.warn(
                f"Trainer(seed={trainer.seed}) does not order the shuffle: every rank splits one device's order, "
                "drawn from the default generator as a RandomSampler draws it; seed_everything() decides it.",
                stacklevel=5,
            )

    def requested(self) -> Any:
        """The training loader as given, requested now if it was not yet (once: :meth:`place` places this one,
        as Lightning's ``fit_loop.setup_data()`` on demand keeps what it loaded)."""
        if self.raw_train is None:
            self._pending = self.raw_train = self._request()
        return self.raw_train

    def draw_data_seed(self) -> None:
        """The seed per-sample draws derive from, the same on every rank."""
        self.data_seed = int(self.trainer.strategy.broadcast(torch.initial_seed()))

    def place(self) -> bool:
        """Shard, seed and position the requested training loader. True when a resumed epoch's data changed and it
        restarts from its first batch (``on_data_change``)."""
        if self._pending is None:
            if self.loader is not None:  # placed already (a batch-size search placed its loaders)
                return False
            self.requested()
        train_loader, self._pending = self._pending, None
        return self._prepare_data(train_loader)

    def start_resumed_workers(self, resumed: bool) -> None:
        """A resumed run's persistent workers, started as the uninterrupted run had them (data.resume)."""
        progress = self.progress
        reloads = self._reload_due(progress.epoch) and not progress.batches_done
        if resumed and not reloads and (progress.epoch > self.loader_epoch or progress.batches_done > 0):
            assert self.loader is not None
            start_persistent_workers(self.loader, start_iterator)

    # ---- the loaders, requested again every n epochs (reload_dataloaders_every_n_epochs) ---------------
    def _check_reload_source(self) -> None:
        every, source = self.trainer.reload_dataloaders_every_n_epochs, self.source
        assert source is not None
        if every and source.given:
            warnings.warn(
                f"reload_dataloaders_every_n_epochs={every} does not change the {' and '.join(source.given)} "
                "loader(s) passed to fit(): the same objects are used every epoch. Return them from the module's "
                "or the DataModule's train_dataloader()/val_dataloader() to get new ones.",
                stacklevel=5,
            )

    def _reload_due(self, epoch: int) -> bool:
        every = self.trainer.reload_dataloaders_every_n_epochs
        return bool(every) and epoch % every == 0 and epoch != self.loader_epoch

    def _reload(self, epoch: int) -> None:
        """A new training loader at the start of ``epoch``; the RNG it started from goes into checkpoints."""
        assert self.source is not None and self.loader is not None
        self.loader_rng = rng_state()
        train_loader = self._request()
        shut_down_workers([self.loader])
        self.loader_epoch = epoch
        self._prepare_data(train_loader)

    def epoch_of_resumed_loaders(self) -> int | None:
        """After a checkpoint's data state is loaded: the earlier epoch whose start requested the loaders the
        resumed epoch ran on, or None when the loaders requested at set-up are those (epoch 0's, or ones
        this epoch's start requests in ``epoch_loader``)."""
        every, position = self.trainer.reload_dataloaders_every_n_epochs, self.progress
        first = position.epoch - position.epoch % every if every else 0
        if not first or (first == position.epoch and not position.batches_done):
            return None
        return first

    def request_loaders_of(self, epoch: int) -> None:
        """The loaders epoch ``epoch``'s start requested, requested again as then (the fit loop shows that
        ``current_epoch``; the RNG is the one they started from), so their order and contents are the same."""
        rng = rng_state()
        self.loader_epoch, self.loader_rng = epoch, self.saved_loader_rng
        try:
            if self.loader_rng is not None:
                set_rng_state(self.loader_rng)
            self._pending = self._request()
        finally:
            set_rng_state(rng)

    def batches_per_epoch(self) -> int | float:
        """This rank's batches per epoch, known from the request on (before the loaders are placed)."""
        if self.loader is not None:
            return self.num_batches
        if self.source is None:
            raise RuntimeError(
                "estimated_stepping_batches needs the training loader: read it in configure_optimizers() or later "
                "during fit()."
            )
        with torch.random.fork_rng(devices=[]):  # sharding draws a seed; this count must not
            return num_batches(as_batches(self._sharded(self.requested())), self.trainer.limits["train"])

    def _request(self) -> Any:
        assert self.source is not None
        return self.source.request_train()

    def _sharded(self, train_loader: Any) -> Iterable[Any]:
        trainer = self.trainer
        agree = functools.partial(_agree, trainer.strategy)
        shard = functools.partial(
            prepare_train_loader,
            **trainer.strategy.distributed_sampler_kwargs,  # data-parallel replicas (a tensor-parallel group: one)
            seed=trainer.seed,
            use_distributed_sampler=trainer.use_distributed_sampler,
            agree=agree,
        )
        return map_loaders(train_loader, shard)  # each loader of a CombinedLoader sharded on its own

    def _prepare_data(self, train_loader: Any) -> bool:
        """Place the loaders; True when a resumed epoch restarts (see ``_continue_position``)."""
        trainer = self.trainer
        self.raw_train = train_loader
        seeded = functools.partial(seed_samples, data_seed=self.data_seed, several_ranks=trainer.world_size > 1)
        self.loader = as_batches(map_loaders(self._sharded(train_loader), seeded))
        self.num_batches = count_batches(self.loader, trainer.limits["train"], "train")
        if self.num_batches == 0 and trainer.limits["train"] != 0:  # limit_train_batches=0: fit trains nothing
            raise MisconfigurationException("the training DataLoader yields no batches (an empty dataset).")
        replicas = trainer.strategy.distributed_sampler_kwargs["num_replicas"]
        self.layout = position.layout(train_loader, replicas, trainer.seed, self.num_batches)
        saved, restarts = self.saved_layout, False
        if saved is not None and 0 < self.progress.batches_done < (saved.get("batches_per_epoch") or math.inf):
            restarts = self._continue_position(train_loader)  # inside an epoch: the position depends on the data
        self.use_train_batches(self.num_batches)
        return restarts

    def _continue_position(self, train_loader: Any) -> bool:
        """A mid-epoch checkpoint's position, in data laid out as now: exact, rebuilt on another number
        of ranks, restarted (when asked: True, the fit loop restarts the epoch), or refused naming what changed."""
        trainer, progress, saved = self.trainer, self.progress, self.saved_layout
        assert saved is not None
        changed = position.changes(saved, self.layout)
        if not changed:
            split = trainer.strategy.distributed_sampler_kwargs
            if saved["world_size"] != split["num_replicas"]:  # same global batch: rebuild the old layout
                resharded = position.reshard(train_loader, saved, split["num_replicas"], split["rank"])
                several = trainer.world_size > 1 or saved["world_size"] > 1  # the old layout's rule
                self.resharded = seed_samples(resharded, self.data_seed, several)
            return False
        what = position.describe(changed)
        if trainer.on_data_change == "restart_epoch":
            warnings.warn(
                f"the training data changed since {self.resumed_from} ({what}): epoch {progress.epoch} restarts from "
                f"its first batch (on_data_change='restart_epoch'); {progress.batches_done} of its batches run again.",
                stacklevel=2,
            )
            self.epoch_rng = {}
            return True
        raise MisconfigurationException(
            f"{self.resumed_from} was saved in the middle of epoch {progress.epoch}, after {progress.batches_done} of "
            f"its batches, but the training data changed since: {what}. That position would skip or repeat samples. "
            "Resume from a checkpoint taken at an epoch's end, or pass Trainer(on_data_change='restart_epoch') to "
            f"train epoch {progress.epoch} again from its first batch with the new data."
        )

    # ---- an epoch's batches --------------------------------------------------------------------------
    def start_first_epoch(self) -> None:
        """Epoch 0's iterator, created where Lightning creates it: after the sanity check, before
        ``on_train_start`` (its ``iter()`` draws the DataLoader's base seed from the default generator). None under
        ``limit_train_batches=0``: Lightning starts no iterator (nor its workers) for a fit that trains nothing."""
        if self.num_batches == 0:
            return
        if self.progress.epoch == 0 and self.progress.batches_done == 0 and self._first is None:
            loader = self.epoch_loader(0, 0)
            self._first = (loader, self.batches(loader, 0, 0))

    def epoch_loader(self, epoch: int, skip: int) -> Iterable[Any]:
        """The loader of ``epoch`` (requested again when due), its order's RNG captured (a new epoch)
        or put back (a resume from batch ``skip``)."""
        assert self.loader is not None
        if self._first is not None and epoch == 0 and skip == 0:
            return self._first[0]
        if self.resume_started and skip == 0:  # as then: iter() from the epoch's RNG, hooks from the checkpoint's
            restore_epoch_rng(self.loader, self.epoch_rng)
            set_epoch(self.loader, epoch)
            self._first, self.resume_started = (self.loader, start_iterator(self.loader)), False
            self._resume_rng_now()
            return self.loader
        if skip == 0:
            self._resume_rng_now()
            if self._reload_due(epoch):
                self._reload(epoch)
            self.epoch_rng = capture_epoch_rng(self.loader)
        loader = self.loader
        if self.resharded is not None:  # the old layout, whose samplers drew from the epoch's global RNG
            loader, self.resharded = self.resharded, None
            torch.set_rng_state(self.epoch_rng["global"])
        else:
            restore_epoch_rng(loader, self.epoch_rng)  # no-op unless resuming mid-epoch
        set_epoch(loader, epoch)
        return loader

    def batches(self, loader: Iterable[Any], epoch: int, skip: int) -> Iterator[Any]:
        """The epoch's batches from batch ``skip``; a resume skips the finished ones at the index level,
        then continues the checkpoint's RNG stream."""
        if self._first is not None and epoch == 0 and skip == 0 and loader is self._first[0]:
            iterator, self._first = self._first[1], None
            return iterator
        if not skip:
            self.data_ended = False
            return start_iterator(loader)
        if self.resumed_data_ended:  # saved after the loader ran out (its last validation): nothing to read past
            self.resumed_data_ended, self.data_ended = False, True
            self._resume_rng_now()
            return iter(())
        reused = epoch > self.loader_epoch and bool(getattr(loader, "persistent_workers", False))
        iterator = start_iterator(skip_batches(loader, skip, reused_workers=reused))
        self._resume_rng_now()
        return iterator

    def no_batches(self, epoch: int) -> None:
        """An epoch whose loader yielded no batch: Lightning ends it. A generator or builtin iterator, though, is used
        up after one pass, so every later epoch would train nothing: refused."""
        loaders = self.raw_train.flattened if isinstance(self.raw_train, CombinedLoader) else [self.raw_train]
        if any(_used_up_once(loader) for loader in loaders):
            raise MisconfigurationException(
                f"the training loader yielded no batch in epoch {epoch}. A generator or iterator is used up after one "
                "pass: pass a list of batches, a DataLoader, or an object whose __iter__ starts over."
            )
        if self.trainer.is_global_zero:
            warnings.warn(
                f"the training loader yielded no batch in epoch {epoch}: the epoch ends without training.",
                PossibleUserWarning,
                stacklevel=4,
            )

    def ran_out(self) -> None:
        """The epoch's loader (one without a length) is used up: a checkpoint saved now resumes past it, without
        reading it again (an ``IterableDataset`` cannot skip batches)."""
        self.data_ended = True

    def _resume_rng_now(self) -> None:
        if self.resume_rng is not None:
            set_rng_state(self.resume_rng)
            self.resume_rng = None

    # ---- what a checkpoint records of the data position -------------------------------------------------
    def data_state(self) -> dict[str, Any]:
        return {"data_seed": self.data_seed, "world_size": self.trainer.world_size, "layout": self.layout}

    def load_data_state(self, state: dict[str, Any], path: Path) -> None:
        self.data_seed = int(state.get("data_seed", self.data_seed))
        self.saved_layout = state.get("layout")
        self.resumed_from = path

    def rank_state(self) -> dict[str, Any]:
        """This rank's RNG and the RNGs that ordered its epoch and requested its loaders."""
        state = {"rng": rng_state(), "epoch_rng": self.epoch_rng, "epoch_started": self._first is not None}
        if self.data_ended:
            state["data_ended"] = True
        return state if self.loader_rng is None else {**state, "loader_rng": self.loader_rng}

    def load_rank_state(self, mine: dict[str, Any], first: dict[str, Any], same_world: bool) -> None:
        """This rank's saved RNG (``mine``); on another number of ranks the epoch's RNG is the first old
        rank's (it ordered the old layout, rebuilt for the rest of the epoch)."""
        self.resume_rng = mine["rng"]
        self.epoch_rng = mine["epoch_rng"] if same_world else first["epoch_rng"]
        self.saved_loader_rng = mine.get("loader_rng")
        started = bool(mine.get("epoch_started", False)) and not self.progress.batches_done
        self.resume_started = started and same_world  # its iterator is made again from epoch_rng
        self.resumed_data_ended = bool(mine.get("data_ended", False)) and self.progress.batches_done > 0


def _used_up_once(loader: Any) -> bool:
    """A generator, or an iterator of the standard library (``iter(list)``, ``map``, ...): one pass only."""
    if isinstance(loader, types.GeneratorType):
        return True
    return isinstance(loader, Iterator) and type(loader).__module__ in ("builtins", "itertools")


def _agree(strategy: Strategy, value: int) -> int:
    """Rank 0's ``value`` on every rank (a shuffle's seed, drawn once per epoch)."""
    return int(strategy.broadcast(value))
