"""What every one-process-per-device strategy shares: ranks, the process group, collectives, timeouts.

Processes come from torchrun, SLURM or a self-launch (``trainer.launch``); each joins one process
group (gloo on CPU, NCCL on CUDA). A collective that times out names what it was and which ranks
never arrived (``CollectiveTimeoutError``). ``DDPStrategy`` and ``FSDPStrategy`` add only how they
wrap the module and step it.

Threads: CPU ranks use torch's default thread count; with several ranks per machine set
``torch.set_num_threads(cores // ranks)`` yourself to avoid oversubscription.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

import trainer.launch as launch
import trainer.supervise as supervise
from trainer import worker_forks
from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments import ClusterEnvironment, cluster_of, detect_environment
from trainer.plugins.io import CheckpointIO
from trainer.strategies import store
from trainer.strategies.base import CollectiveTimeoutError, ReduceOp, Stage, Strategy
from trainer.strategies.spawn import START_METHODS, MultiprocessingLauncher

_ABSENT_GRACE_S = 2.0  # after a collective timed out: how long the other waiting ranks have to say so
_REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


class ParallelStrategy(Strategy):
    """One process per device in one process group; subclasses say how the module is wrapped."""

    name = "parallel"
    step_collectives = "a collective inside the step"  # named when one times out

    def __init__(
        self,
        *,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        rendezvous_timeout: timedelta = timedelta(minutes=3),
        start_method: str = "popen",
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        parallel_devices: list[torch.device] | None = None,
    ) -> None:
        """``timeout`` bounds each collective (default: ``Trainer(collective_timeout=...)``, 10 minutes);
        ``rendezvous_timeout`` bounds waiting for all ranks to join. ``start_method``: "popen" re-runs the
        script for the other ranks; "spawn" and "fork" start them from this process (``trainer.strategies.spawn``).
        ``cluster_environment`` replaces the detected launcher (torchrun, SLURM, ...)."""
        super().__init__(checkpoint_io=checkpoint_io)
        if start_method not in START_METHODS:
            raise MisconfigurationException(
                f"start_method={start_method!r} is not supported; choose one of {', '.join(START_METHODS)}."
            )
        if cluster_environment is not None and not isinstance(cluster_environment, ClusterEnvironment):
            raise MisconfigurationException(
                f"cluster_environment={cluster_environment!r} is not a ClusterEnvironment "
                "(trainer.plugins.environments: SLURMEnvironment(), TorchElasticEnvironment(), ...)."
            )
        self.start_method = start_method
        self.launcher = MultiprocessingLauncher(start_method) if start_method != "popen" else None
        self.cluster_environment: ClusterEnvironment | None = cluster_environment
        self._environment_given = cluster_environment is not None
        self.parallel_devices = list(parallel_devices) if parallel_devices else None
        self._backend_arg = process_group_backend
        self.backend = process_group_backend or "gloo"
        self._timeout_arg = timeout
        self.rendezvous_timeout = rendezvous_timeout
        self.cluster: launch.ClusterEnv | None = None
        self._owns_group = False
        self._store: dist.Store | None = None  # this group's part of the job's store

    @property
    def process_group_backend(self) -> str | None:
        """Lightning's name: the backend given, else the one chosen for the accelerator (gloo, or nccl on CUDA)."""
        return self._backend_arg or self.backend

    def configure(
        self,
        accelerator: str,
        device_indices: list[int],
        num_nodes: int = 1,
        collective_timeout: timedelta | None = None,
    ) -> None:
        if accelerator not in ("cpu", "cuda"):
            raise MisconfigurationException(
                f"strategy={self.name!r} runs on accelerator='cpu' (gloo) or 'cuda' (nccl), not {accelerator!r}."
            )
        given = self._timeout_arg
        if given is not None and collective_timeout is not None and given != collective_timeout:
            raise MisconfigurationException(
                f"{type(self).__name__}(timeout={given}) and Trainer(collective_timeout={collective_timeout}) "
                "disagree; set one of them."
            )
        super().configure(accelerator, device_indices, num_nodes, collective_timeout or given)
        self.backend = self._backend_arg or ("nccl" if accelerator == "cuda" else "gloo")
        if self.cluster_environment is None:
            self.cluster_environment = detect_environment()
        if self.launcher is not None:
            self.launcher.check_platform(self.name)
        if self.parallel_devices is None:
            device = torch.device(accelerator) if accelerator == "cpu" else None
            self.parallel_devices = [device or torch.device(accelerator, i) for i in device_indices]

    def set_cluster_environment(self, environment: ClusterEnvironment) -> None:
        """``Trainer(plugins=[env])``: the environment the ranks come from (refused when the strategy has one)."""
        if self._environment_given and environment is not self.cluster_environment:
            raise MisconfigurationException(
                "cluster_environment set through both strategy class and plugins, choose one: "
                f"{type(self).__name__}(cluster_environment={self.cluster_environment!r}) and "
                f"plugins=[{environment!r}]."
            )
        self.cluster_environment = environment
        self._environment_given = True

    @property
    def timeout(self) -> timedelta:
        """How long a collective waits for every rank before failing."""
        return self.collective_timeout

    # ---- process facts -------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        if self.accelerator == "cuda":
            return torch.device("cuda", self.device_indices[self.local_rank])
        return torch.device("cpu")

    @property
    def global_rank(self) -> int:
        return self.cluster.rank if self.cluster else 0

    @property
    def local_rank(self) -> int:
        return self.cluster.local_rank if self.cluster else 0

    @property
    def node_rank(self) -> int:
        return self.cluster.node_rank if self.cluster else 0

    @property
    def world_size(self) -> int:
        return self.cluster.world_size if self.cluster else len(self.device_indices) * self.num_nodes

    @property
    def num_processes(self) -> int:
        """Processes on this machine, one per device (Lightning's name: scripts divide their batch size by it)."""
        return len(self.device_indices)

    # ---- life cycle ----------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Find (or start) the other ranks, pin this rank's device, join the process group."""
        cluster = self._find_cluster()
        supervise.start_processes(cluster)
        self.cluster = cluster
        launch.set_global_rank(cluster.rank)  # rank_zero_only (trainer.utilities) skips the other ranks, as Lightning
        if cluster.local_rank >= len(self.device_indices):
            raise RuntimeError(
                f"local rank {cluster.local_rank} has no device: devices={self.device_indices} lists only "
                f"{len(self.device_indices)} per node."
            )
        if self.accelerator == "cuda":
            torch.cuda.set_device(self.root_device)
        if not dist.is_initialized():
            self._init_process_group(cluster)
            self._owns_group = True
            atexit.register(_destroy_group)

    def _find_cluster(self) -> launch.ClusterEnv:
        """The launcher's variables (torchrun, SLURM, a self-launch), or those of the environment the user gave."""
        env = self.cluster_environment
        devices = len(self.device_indices)
        if env is None or not self._environment_given or not env.creates_processes_externally:
            return launch.detect_cluster(devices, self.num_nodes)
        env.validate_settings(devices, self.num_nodes)
        return cluster_of(env, devices, self.num_nodes)

    def _init_process_group(self, cluster: launch.ClusterEnv) -> None:
        base = store.job_store(cluster, self.rendezvous_timeout)
        base.set_timeout(self.rendezvous_timeout)  # a missing rank fails the join fast, with a clear message
        prefixed = self._store = dist.PrefixStore(f"{store.attempt_prefix()}/init{store.next_init()}", base)
        device_id = self.root_device if self.accelerator == "cuda" else None
        hook = sys.excepthook  # torch wraps it on every init ("[rankN]:" prefix); launch already labels ranks
        dist.init_process_group(
            self.backend,
            store=prefixed,
            rank=cluster.rank,
            world_size=cluster.world_size,
            timeout=self.timeout,
            device_id=device_id,
        )
        sys.excepthook = hook
        base.set_timeout(self.timeout)  # later store use (NCCL's lazy communicators) gets the long timeout

    syncs_buffers = True  # evaluation starts from rank 0's buffers (DDP: unless broadcast_buffers=False)

    def step_function(self, stage: Stage) -> Callable[..., Any]:
        """An evaluation loop first takes rank 0's buffers: each rank's training batches move its
        BatchNorm statistics apart (DDP syncs them in every forward, FSDP never), and every rank must
        score one model, the one the checkpoint holds, as in Lightning. A DTensor buffer (split across
        ranks, not replicated) is left alone."""
        if stage != "training" and self.syncs_buffers and self.module is not None:
            self._broadcast([b for b in self.module.buffers() if type(b) is torch.Tensor])
        return super().step_function(stage)

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Rank 0's values into every rank's tensors, one flat broadcast per dtype (one flat tensor of
        mixed dtypes would round an int64 counter or a float64 buffer through float32)."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for tensor in tensors:
            by_dtype.setdefault(tensor.dtype, []).append(tensor.detach())
        with torch.no_grad(), self._collective("broadcast of rank 0's weights and buffers"):
            for group in by_dtype.values():
                flat = _flatten_dense_tensors(group)
                dist.broadcast(flat, src=0)
                for tensor, synced in zip(group, _unflatten_dense_tensors(flat, group)):
                    tensor.copy_(synced)

    def teardown(self) -> None:
        """End of a stage: drop the wrapper, keep the process group.

        A script may fit, then validate, test, predict and save: every stage (and
        ``save_checkpoint``, a collective) needs the group, so it lives until the process exits
        or ``destroy_process_group()`` is called. Self-launched children are awaited at exit.
        """
        super().teardown()
        self.model = None

    def destroy_process_group(self) -> None:
        """Leave the process group this strategy created (every rank must call it)."""
        if self._owns_group:
            _destroy_group()
        self._owns_group = False

    def on_exception(self, exception: BaseException) -> None:
        supervise.on_rank_exception(exception)

    def explain_failure(self, exception: BaseException) -> BaseException | None:
        if isinstance(exception, CollectiveTimeoutError) or not _is_timeout(exception):
            return None
        return self._timeout_error(self.step_collectives)

    def _timeout_error(self, what: str) -> CollectiveTimeoutError:
        seconds = self.timeout.total_seconds()
        absent = self._absent_ranks(what)
        who = "another rank" if not absent else ", ".join(f"rank {r}" for r in absent)
        return CollectiveTimeoutError(
            f"rank {self.global_rank}: {what} timed out after {seconds:.0f}s: {who} did not arrive (stuck in its "
            "step, its data loading or a hook, or slower than the timeout). If the ranks are only slow (e.g. rank 0 "
            "writing a large checkpoint), raise Trainer(collective_timeout=...)."
        )

    def _absent_ranks(self, what: str) -> list[int]:
        """The ranks that never reached the collective that timed out. Every rank waiting in it times out
        as well and says so in the job's store; a rank that stays silent is stuck elsewhere."""
        shared = self._store
        if shared is None or self.world_size < 2:
            return []
        try:
            shared.set(f"timed_out/{self.global_rank}", what)
            deadline = time.monotonic() + _ABSENT_GRACE_S
            while True:
                absent = [r for r in range(self.world_size) if not shared.check([f"timed_out/{r}"])]
                if not absent or time.monotonic() >= deadline:
                    return absent
                time.sleep(0.1)
        except (RuntimeError, ValueError):  # the store went with rank 0: nothing more to learn
            return []

    @contextlib.contextmanager
    def _collective(self, what: str) -> Iterator[None]:
        """Name the collective when it times out, instead of gloo's or NCCL's transport message."""
        try:
            yield
        except RuntimeError as error:
            if _is_timeout(error):
                raise self._timeout_error(what) from error
            raise

    # ---- collectives ---------------------------------------------------------------------
    def _to_comm_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """NCCL only moves CUDA tensors; gloo takes them where they are."""
        if self.backend == "nccl" and tensor.device != self.root_device:
            return tensor.to(self.root_device)
        return tensor

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """A reduced copy; ``mean`` is sum / world size (so integer input gives a float mean)."""
        if op not in _REDUCE_OPS:
            raise MisconfigurationException(f"op={op!r} is not one of {', '.join(_REDUCE_OPS)}.")
        result = self._to_comm_device(tensor).clone()
        with self._collective(f"all_reduce({op})"):
            dist.all_reduce(result, op=_REDUCE_OPS[op])
        if op == "mean":
            result = result / self.world_size
        return result.to(tensor.device)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Same-shape tensors from every rank, stacked along a new first dimension."""
        local = self._to_comm_device(tensor).contiguous()
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        with self._collective("all_gather"):
            dist.all_gather(gathered, local)
        return torch.stack(gathered).to(tensor.device)

    def gather_objects(self, obj: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.world_size
        with self._collective("all_gather_object (building a checkpoint)"):
            dist.all_gather_object(gathered, obj)
        return gathered

    def reduce_boolean_decision(self, flag: bool) -> bool:
        """True on every rank if any rank says True (so all ranks stop together)."""
        votes = self._to_comm_device(torch.tensor(int(flag)))
        with self._collective("all_reduce (the ranks deciding together whether to stop)"):
            dist.all_reduce(votes)
        return bool(votes.item() > 0)

    def start_boolean_decision(self, flag: bool) -> Callable[[], bool]:
        """The all_reduce runs in the background (gloo's threads, NCCL's stream) until it is read."""
        votes = self._to_comm_device(torch.tensor(int(flag)))
        what = "all_reduce (the ranks deciding together whether to stop)"
        with self._collective(what):
            work = dist.all_reduce(votes, async_op=True)

        def read() -> bool:
            with self._collective(what):
                work.wait()
            return bool(votes.item() > 0)

        return read

    def barrier(self) -> None:
        if dist.is_initialized():
            with self._collective("barrier (e.g. waiting for rank 0 to write a checkpoint)"):
                dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not dist.is_initialized():
            return obj
        box = [obj]
        with self._collective(f"broadcast_object_list from rank {src}"):
            dist.broadcast_object_list(box, src=src)
        return box[0]


def _is_timeout(error: BaseException) -> bool:
    """gloo: 'Timed out waiting Nms for recv'; NCCL's watchdog: 'collective operation timeout'."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, RuntimeError) and re.search(r"timed out|operation timeout", str(seen), re.IGNORECASE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _destroy_group() -> None:
    """Destroy the default process group, if any.

    The short pause first releases the GIL so gloo's worker threads can free the allreduce work
    DDP issued in backward; a worker still waiting for the GIL when the interpreter shuts down
    aborts the process (torch 2.x; ~10% of runs that exit right after a step, on a busy machine).
    """
    if dist.is_initialized():
        worker_forks.let_communication_threads_finish()
        dist.destroy_process_group()
