"""SLURM: ``srun``/``sbatch`` start every rank; the first host of the node list hosts the rendezvous."""

from __future__ import annotations

import os
import signal

from trainer import launch
from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments.base import ClusterEnvironment, _required


class SLURMEnvironment(ClusterEnvironment):
    """Ranks from ``SLURM_PROCID``/``SLURM_LOCALID``/``SLURM_NODEID``, world size from ``SLURM_NTASKS``.

    ``auto_requeue=False`` leaves the requeue signal alone; ``requeue_signal`` names it (default SIGUSR1).
    On that signal steadytrain saves ``interrupted.ckpt`` and exits 0; resubmitting is the job script's.
    """

    def __init__(self, auto_requeue: bool = True, requeue_signal: signal.Signals | None = None) -> None:
        if not isinstance(auto_requeue, bool):
            raise MisconfigurationException(f"SLURMEnvironment(auto_requeue={auto_requeue!r}) must be True or False.")
        if requeue_signal is not None and not isinstance(requeue_signal, signal.Signals):
            raise MisconfigurationException(
                f"SLURMEnvironment(requeue_signal={requeue_signal!r}) must be a signal.Signals, e.g. signal.SIGUSR1."
            )
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal if requeue_signal is not None else signal.SIGUSR1

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        nodelist = os.environ.get("SLURM_NODELIST") or os.environ.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        return os.environ.get("MASTER_ADDR") or launch.expand_hostlist(nodelist)[0]

    @property
    def main_port(self) -> int:
        port = os.environ.get("MASTER_PORT")
        return int(port) if port else launch.slurm_port(os.environ.get("SLURM_JOB_ID"))

    @staticmethod
    def detect() -> bool:
        """SLURM started the tasks; an interactive shell on an allocation (job name bash/interactive) is no launcher."""
        return launch.slurm_managed(os.environ)

    @staticmethod
    def job_name() -> str | None:
        return os.environ.get("SLURM_JOB_NAME")

    @staticmethod
    def job_id() -> int | None:
        job_id = os.environ.get("SLURM_JOB_ID")
        if not job_id or not job_id.isdigit():
            return None
        return int(job_id)

    def world_size(self) -> int:
        return _required("SLURM_NTASKS", "srun")

    def set_world_size(self, size: int) -> None:
        """SLURM fixes the world size; nothing to set."""

    def global_rank(self) -> int:
        return _required("SLURM_PROCID", "srun")

    def set_global_rank(self, rank: int) -> None:
        """SLURM fixes the rank; nothing to set."""

    def local_rank(self) -> int:
        return int(os.environ.get("SLURM_LOCALID", 0))

    def node_rank(self) -> int:
        return int(os.environ.get("SLURM_NODEID", 0))

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        per_node = os.environ.get("SLURM_NTASKS_PER_NODE")
        if per_node is not None and per_node.isdigit() and int(per_node) != num_devices:
            raise MisconfigurationException(
                f"devices={num_devices} disagrees with SLURM_NTASKS_PER_NODE={per_node}: submit with "
                f"--ntasks-per-node={num_devices}, or set devices={per_node}."
            )
        nodes = os.environ.get("SLURM_NNODES")
        if nodes is not None and nodes.isdigit() and int(nodes) != num_nodes:
            raise MisconfigurationException(
                f"num_nodes={num_nodes} disagrees with SLURM_NNODES={nodes}: submit with --nodes={num_nodes}, "
                f"or set num_nodes={nodes}."
            )

    def __repr__(self) -> str:
        return f"SLURMEnvironment(auto_requeue={self.auto_requeue}, requeue_signal={self.requeue_signal.name})"
