"""Start-up trace points (``benchmarks/startup.py``): with ``$ACCELFLOW_STARTUP_TRACE`` set
to a file, a process appends ``<time.time()> <pid> <event>`` lines to it; unset, nothing."""

from __future__ import annotations

import os
import time

TRACE_ENV_VAR = "ACCELFLOW_STARTUP_TRACE"


def trace(event: str, when: float | None = None) -> None:
    """Append ``event`` (at ``when``, default now) to the trace file, if one is set."""
    path = os.environ.get(TRACE_ENV_VAR)
    if not path:
        return
    stamp = time.time() if when is None else when
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:  # one small O_APPEND write: lines of concurrent processes do not interleave
        os.write(fd, f"{stamp:.6f} {os.getpid()} {event}\n".encode())
    finally:
        os.close(fd)


def process_started() -> float:
    """When this process was created (``time.time()`` scale; to the kernel's clock tick)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # starttime, field 22: clock ticks since boot
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
