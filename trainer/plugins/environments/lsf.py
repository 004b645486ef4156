"""IBM LSF with ``jsrun``: ranks from the Job Step Manager's variables, hosts from the job's rank file."""

from __future__ import annotations

import os
import socket

from trainer.plugins.environments.base import ClusterEnvironment, _required


class LSFEnvironment(ClusterEnvironment):
    """``JSM_NAMESPACE_RANK``/``_LOCAL_RANK``/``_SIZE``; the first compute host of ``LSB_DJOB_RANKFILE`` is rank 0's."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return _read_hosts()[0]

    @property
    def main_port(self) -> int:
        """``MASTER_PORT`` where set, else derived from the job id alike on every host."""
        if port := os.environ.get("MASTER_PORT"):
            return int(port)
        job_id = os.environ.get("LSB_JOBID")
        if not job_id or not job_id.isdigit():
            raise ValueError(f"LSB_JOBID={job_id!r} is no job id; set MASTER_PORT, or run under LSF's jsrun.")
        return 10000 + int(job_id) % 1000

    @staticmethod
    def detect() -> bool:
        return {"LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE"} <= set(os.environ)

    def world_size(self) -> int:
        return _required("JSM_NAMESPACE_SIZE", "jsrun")

    def set_world_size(self, size: int) -> None:
        """jsrun fixes the world size; nothing to set."""

    def global_rank(self) -> int:
        return _required("JSM_NAMESPACE_RANK", "jsrun")

    def set_global_rank(self, rank: int) -> None:
        """jsrun fixes the rank; nothing to set."""

    def local_rank(self) -> int:
        return _required("JSM_NAMESPACE_LOCAL_RANK", "jsrun")

    def node_rank(self) -> int:
        """This host's place among the job's distinct hosts, in the rank file's order."""
        hosts = list(dict.fromkeys(_read_hosts()))
        name = socket.gethostname()
        if name not in hosts:
            raise ValueError(f"this host ({name}) is not in LSB_DJOB_RANKFILE's hosts {hosts}.")
        return hosts.index(name)


def _read_hosts() -> list[str]:
    """The compute hosts of the job: the rank file's lines after the first (the launch node)."""
    path = os.environ.get("LSB_DJOB_RANKFILE")
    if not path:
        raise ValueError("LSB_DJOB_RANKFILE is not set or empty: run under LSF's jsrun.")
    with open(path) as file:
        hosts = [line.strip() for line in file if line.strip()]
    return hosts[1:]
