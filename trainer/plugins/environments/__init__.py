"""Lightning's cluster environments (``lightning.pytorch.plugins.environments``): who started the ranks.

``detect_environment`` picks the one this process runs in, in Lightning's order (torchrun first: it runs
inside SLURM allocations too), else ``LightningEnvironment`` (the strategy starts the ranks itself).
"""

from __future__ import annotations

from trainer import launch
from trainer.plugins.environments.base import ClusterEnvironment, LightningEnvironment
from trainer.plugins.environments.lsf import LSFEnvironment
from trainer.plugins.environments.mpi import MPIEnvironment, XLAEnvironment
from trainer.plugins.environments.slurm import SLURMEnvironment
from trainer.plugins.environments.torchelastic import KubeflowEnvironment, TorchElasticEnvironment


def detect_environment() -> ClusterEnvironment:
    """The cluster this process runs in: torchrun, SLURM, LSF, MPI, or none (``LightningEnvironment``)."""
    for environment in (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment):
        if environment.detect():
            return environment()
    return LightningEnvironment()


def cluster_of(environment: ClusterEnvironment, num_devices: int, num_nodes: int) -> launch.ClusterEnv:
    """The job as an environment that started every rank tells it (checked against ``devices x num_nodes``)."""
    cluster = launch.ClusterEnv(
        rank=environment.global_rank(),
        local_rank=environment.local_rank(),
        world_size=environment.world_size(),
        node_rank=environment.node_rank(),
        local_world_size=num_devices,
        master_addr=environment.main_address,
        master_port=environment.main_port,
        source=type(environment).__name__,
    )
    launch.check_world_size(cluster, num_devices, num_nodes)
    return cluster


__all__ = [
    "ClusterEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LightningEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
    "cluster_of",
    "detect_environment",
]
