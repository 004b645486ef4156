"""torchrun (TorchElastic) and Kubeflow's PyTorchJob: the launcher sets torch's variables for every rank."""

from __future__ import annotations

import os
import warnings

from trainer.plugins.environments.base import ClusterEnvironment, _required


class TorchElasticEnvironment(ClusterEnvironment):
    """``torchrun``: ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK`` (the node), ``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return _required("MASTER_PORT", "torchrun")

    @staticmethod
    def detect() -> bool:
        """torchrun sets ``TORCHELASTIC_RUN_ID`` for every rank (torch's and Lightning's test), so it wins over a
        SLURM job's variables when torchrun runs inside an allocation; or its rank variables, all four."""
        return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} <= set(
            os.environ
        )

    def world_size(self) -> int:
        return _required("WORLD_SIZE", "torchrun")

    def set_world_size(self, size: int) -> None:
        if size != self.world_size():
            warnings.warn(
                f"torchrun started WORLD_SIZE={self.world_size()} processes; the Trainer asked for {size}: "
                "torchrun's count wins.",
                stacklevel=2,
            )

    def global_rank(self) -> int:
        return _required("RANK", "torchrun")

    def set_global_rank(self, rank: int) -> None:
        """torchrun fixes the rank; nothing to set."""

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", 0))

    def node_rank(self) -> int:
        return int(os.environ.get("GROUP_RANK", 0))


class KubeflowEnvironment(ClusterEnvironment):
    """Kubeflow's PyTorchJob: one process per pod, ``RANK`` and ``WORLD_SIZE`` count pods. Never detected:
    pass ``Trainer(plugins=[KubeflowEnvironment()])``."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return _required("MASTER_PORT", "a Kubeflow PyTorchJob")

    @staticmethod
    def detect() -> bool:
        raise NotImplementedError(
            "The Kubeflow environment can't be detected automatically; pass Trainer(plugins=[KubeflowEnvironment()])."
        )

    def world_size(self) -> int:
        return _required("WORLD_SIZE", "a Kubeflow PyTorchJob")

    def set_world_size(self, size: int) -> None:
        """Kubeflow fixes the world size; nothing to set."""

    def global_rank(self) -> int:
        return _required("RANK", "a Kubeflow PyTorchJob")

    def set_global_rank(self, rank: int) -> None:
        """Kubeflow fixes the rank; nothing to set."""

    def local_rank(self) -> int:
        return 0

    def node_rank(self) -> int:
        return self.global_rank()
