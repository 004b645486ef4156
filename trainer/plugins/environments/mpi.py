"""MPI (``mpirun``/``mpiexec``) through mpi4py, and XLA's environment (TPUs: not supported)."""

from __future__ import annotations

import importlib.util
import os
import socket
from typing import Any

from trainer import launch
from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments.base import ClusterEnvironment, LightningEnvironment


def _mpi4py_available() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


class MPIEnvironment(ClusterEnvironment):
    """Ranks from MPI's communicator; rank 0 picks the rendezvous address and port and broadcasts them."""

    def __init__(self) -> None:
        if not _mpi4py_available():
            raise ModuleNotFoundError("MPIEnvironment needs mpi4py: `pip install mpi4py` (with an MPI library).")
        from mpi4py import MPI

        self._comm_world = MPI.COMM_WORLD
        self._node_rank: int | None = None
        self._main_address_and_port: tuple[str, int] | None = None

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return self._address_and_port()[0]

    @property
    def main_port(self) -> int:
        return self._address_and_port()[1]

    def _address_and_port(self) -> tuple[str, int]:
        if self._main_address_and_port is None:
            mine = (socket.gethostname(), launch.find_free_port("0.0.0.0")) if self.global_rank() == 0 else None
            self._main_address_and_port = self._comm_world.bcast(mine, root=0)
        return self._main_address_and_port

    @staticmethod
    def detect() -> bool:
        if not _mpi4py_available():
            return False
        from mpi4py import MPI

        return bool(MPI.COMM_WORLD.Get_size() > 1)

    def world_size(self) -> int:
        return int(self._comm_world.Get_size())

    def set_world_size(self, size: int) -> None:
        """MPI fixes the world size; nothing to set."""

    def global_rank(self) -> int:
        return int(self._comm_world.Get_rank())

    def set_global_rank(self, rank: int) -> None:
        """MPI fixes the rank; nothing to set."""

    def local_rank(self) -> int:
        return int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK") or os.environ.get("MPI_LOCALRANKID") or 0)

    def node_rank(self) -> int:
        if self._node_rank is None:
            hosts = self._comm_world.allgather(socket.gethostname())
            self._node_rank = list(dict.fromkeys(hosts)).index(socket.gethostname())
        return self._node_rank


class XLAEnvironment(LightningEnvironment):
    """TPU pods through torch_xla: not supported. Named so a port that imports it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(
            "XLAEnvironment: steadytrain does not run on TPUs (XLA); use accelerator='cuda' or 'cpu' with "
            "strategy='ddp' (torchrun or SLURM start the ranks)."
        )

    @staticmethod
    def detect() -> bool:
        return False
