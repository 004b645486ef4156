"""Lightning's ``ClusterEnvironment``: who started this process and where the job's rendezvous is.

A strategy asks its environment for the ranks, the world size and the rendezvous address. A user's own
subclass (``Trainer(plugins=[MyCluster()])``) replaces the one steadytrain detects.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

from trainer import launch


class ClusterEnvironment(ABC):
    """Where this process sits in the job; subclass it for a cluster steadytrain does not know."""

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """True where a launcher (torchrun, SLURM, jsrun, mpirun) started every rank; False where the strategy
        starts them itself."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Host of global rank 0, where the rendezvous store listens."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """Port of the rendezvous store."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether this process runs inside such a cluster."""

    @abstractmethod
    def world_size(self) -> int: ...

    @abstractmethod
    def set_world_size(self, size: int) -> None: ...

    @abstractmethod
    def global_rank(self) -> int: ...

    @abstractmethod
    def set_global_rank(self, rank: int) -> None: ...

    @abstractmethod
    def local_rank(self) -> int: ...

    @abstractmethod
    def node_rank(self) -> int: ...

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Refuse ``devices x num_nodes`` that the cluster's own settings contradict; nothing by default."""

    def teardown(self) -> None:
        """Clean up what the environment set (nothing by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LightningEnvironment(ClusterEnvironment):
    """No cluster launcher: the strategy starts the ranks on this machine (or a user set the variables by hand).

    ``MASTER_ADDR``/``MASTER_PORT`` are read where set; otherwise ``127.0.0.1`` and a port free now.
    """

    def __init__(self) -> None:
        self._main_port = -1
        self._global_rank = 0
        self._world_size = 1

    @property
    def creates_processes_externally(self) -> bool:
        """Ranks started by hand with ``LOCAL_RANK`` set exist already; otherwise the strategy starts them."""
        return "LOCAL_RANK" in os.environ

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        if self._main_port == -1:
            port = os.environ.get("MASTER_PORT")
            self._main_port = int(port) if port else launch.find_free_port()
        return self._main_port

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._world_size

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._global_rank

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank
        launch.set_global_rank(rank)

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", 0))

    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK") or 0)

    def teardown(self) -> None:
        os.environ.pop("WORLD_SIZE", None)


def _required(name: str, launcher: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise ValueError(f"{name} is not set: run under {launcher}, which sets it for every rank.")
    return int(value)
