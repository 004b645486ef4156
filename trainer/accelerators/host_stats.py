"""The host's CPU, memory and swap use in percent, under Lightning's keys (``cpu_percent``, ``cpu_vm_percent``,
``cpu_swap_percent``): from ``psutil`` when installed, else from Linux's ``/proc`` (Lightning requires psutil)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PROC = Path("/proc")
_last_cpu_times: list[tuple[float, float]] = []  # /proc/stat's (busy, total) at the last reading


def host_stats_available() -> bool:
    return importlib.util.find_spec("psutil") is not None or (_PROC / "meminfo").is_file()


def get_cpu_stats() -> dict[str, float]:
    """CPU use since the last call (0.0 the first time, as psutil's ``cpu_percent()``), memory and swap in use."""
    if importlib.util.find_spec("psutil") is not None:
        import psutil

        return {
            "cpu_vm_percent": float(psutil.virtual_memory().percent),
            "cpu_percent": float(psutil.cpu_percent()),
            "cpu_swap_percent": float(psutil.swap_memory().percent),
        }
    if not host_stats_available():
        raise ModuleNotFoundError("Reading CPU stats needs psutil here: `pip install psutil`.")
    memory = _meminfo()
    return {
        "cpu_vm_percent": _percent_used(memory["MemTotal"], memory["MemAvailable"]),
        "cpu_percent": _cpu_percent(),
        "cpu_swap_percent": _percent_used(memory["SwapTotal"], memory["SwapFree"]),
    }


def _cpu_percent() -> float:
    fields = [float(v) for v in (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user time
    previous = _last_cpu_times[-1] if _last_cpu_times else None
    _last_cpu_times[:] = [(total - idle, total)]
    if previous is None or total <= previous[1]:
        return 0.0
    return round(100.0 * (total - idle - previous[0]) / (total - previous[1]), 1)


def _meminfo() -> dict[str, float]:
    """``/proc/meminfo`` in kB, by name."""
    values: dict[str, float] = {}
    for line in (_PROC / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if rest.split():
            values[name] = float(rest.split()[0])
    return values


def _percent_used(total: float, free: float) -> float:
    return round(100.0 * (total - free) / total, 1) if total > 0 else 0.0
