"""The job's rendezvous store: rank 0 hosts a TCPStore every rank of the job reaches at MASTER_ADDR:MASTER_PORT."""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

import trainer.launch as launch

# One TCPStore per job and process: rank 0's server must outlive a destroyed group, because a later
# stage (fit, then test) joins again on the same MASTER_PORT. Each join uses a fresh key prefix; every
# rank counts its joins alike, since all ranks run the same script.
_job_stores: dict[tuple[str, int, int, int], dist.TCPStore] = {}
_init_count = 0


def attempt_prefix() -> str:
    """This attempt's part of the job's store. torchrun's agent keeps its store across ``--max-restarts``
    restarts, so without the attempt a restarted rank would read the dead ranks' gloo addresses (as
    torch itself does for its own keys: ``/worker/attempt_<n>``)."""
    return f"steadytrain/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def next_init() -> int:
    global _init_count
    _init_count += 1
    return _init_count


def job_store(cluster: launch.ClusterEnv, timeout: timedelta) -> dist.TCPStore:
    key = (cluster.master_addr, cluster.master_port, cluster.rank, cluster.world_size)
    if key not in _job_stores:
        _job_stores[key] = _connect_store(cluster, timeout)
    return _job_stores[key]


def _connect_store(cluster: launch.ClusterEnv, timeout: timedelta) -> dist.TCPStore:
    """Host or reach the job's TCPStore, failing clearly when the port is taken or ranks are missing.

    Rank 0 hosts it unless torchrun's agent already does (``TORCHELASTIC_USE_AGENT_STORE``).
    """
    is_host = cluster.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    address = f"{cluster.master_addr}:{cluster.master_port}"
    try:
        return dist.TCPStore(
            cluster.master_addr,
            cluster.master_port,
            cluster.world_size,
            is_master=is_host,
            timeout=timeout,
            wait_for_workers=True,
        )
    except RuntimeError as error:  # DistNetworkError / DistStoreError
        text = str(error)
        if "address already in use" in text.lower() or "eaddrinuse" in text.lower():
            raise RuntimeError(
                f"rank 0 cannot listen on MASTER_PORT={cluster.master_port} ({address}): another process "
                "uses the port. Free it or choose another MASTER_PORT."
            ) from error
        cause = text.splitlines()[0] if text else type(error).__name__
        raise RuntimeError(
            f"rank {cluster.rank}: not all {cluster.world_size} ranks (WORLD_SIZE) joined at {address} "
            f"within {timeout.total_seconds():.0f}s. Check that every node runs the same devices x num_nodes "
            f"and can reach MASTER_ADDR:MASTER_PORT ({cause})."
        ) from error
