"""Holding a subtask to the device memory it asked for (``resources={"gpu": {"memory": ...}}``).

The JobManager hands each subtask the bytes it holds of each device whose memory is known
(``SubtaskDescriptor.memory``: its request, else its share of the device's memory). The subtask
sets its frameworks' per-process limit on its first visible device (the device its isolation
makes ``cuda:0``) from it:

* CuPy: ``CUPY_GPU_MEMORY_LIMIT`` before CuPy is imported (its default pool reads it), and the
  default pool's ``set_limit(size=...)`` where it is imported already;
* PyTorch: ``torch.cuda.set_per_process_memory_fraction(limit / total, 0)`` once ``torch`` is
  imported (by the user's functions, when they are unpickled or opened).

An allocation past the limit raises the framework's ``OutOfMemoryError``; :func:`explain`
turns it into a :class:`~accelflow.DeviceMemoryExceeded` naming the operator, its request and
what it used, so that subtask fails alone: its device's other subtasks hold limits of their own.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from accelflow._errors import DeviceMemoryExceeded
from accelflow.runtime import SubtaskDescriptor
from accelflow.scheduling import MEMORY_PROPERTY, format_bytes

CUPY_LIMIT_ENV_VAR = "CUPY_GPU_MEMORY_LIMIT"
_MIB = 1 << 20
_log = logging.getLogger("accelflow.runtime")


def limit_of(desc: SubtaskDescriptor) -> tuple[str, str, int, int | None] | None:
    """``(resource, address, limit, total)`` of the subtask's first device with a memory
    limit (its lowest address: the first the isolation makes visible), or ``None``."""
    for resource in sorted(desc.memory):
        held = desc.memory[resource]
        shares = {d.info().address: d for d in desc.assigned.get(resource, ())}
        for address in sorted(held, key=lambda a: (len(a), a)):
            total = shares[address].properties.get(MEMORY_PROPERTY) if address in shares else None
            return resource, address, held[address], int(total) * _MIB if total and total.isdigit() else None
    return None


def before_user_code(desc: SubtaskDescriptor) -> None:
    """Set what must be set before the user's code imports a framework (CuPy's variable)."""
    limit = limit_of(desc)
    if limit is not None:
        os.environ[CUPY_LIMIT_ENV_VAR] = str(limit[2])


def hold_frameworks(desc: SubtaskDescriptor) -> None:
    """Set the limit in the frameworks imported by now (after the operators opened)."""
    limit = limit_of(desc)
    if limit is None:
        return
    _, _, size, total = limit
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().set_limit(size=size)
        except Exception as exc:  # no CUDA here: nothing to hold
            _log.debug("CuPy's pool limit not set: %s", exc)
    torch = sys.modules.get("torch")
    if torch is not None and total:
        try:
            if torch.cuda.is_available():
                torch.cuda.set_per_process_memory_fraction(min(1.0, size / total), 0)
        except Exception as exc:
            _log.debug("PyTorch's memory fraction not set: %s", exc)


def explain(exc: BaseException, desc: SubtaskDescriptor, plan: Any) -> BaseException:
    """``exc`` as a :class:`DeviceMemoryExceeded` when it is a framework's out-of-memory error
    in a subtask held to a limit; else ``exc``."""
    limit = limit_of(desc)
    if limit is None or type(exc).__name__ != "OutOfMemoryError":
        return exc
    resource, address, size, _ = limit
    asking = [n for n in getattr(plan, "nodes", ()) if resource in n.resources.memory] or [
        n for n in getattr(plan, "nodes", ()) if resource in n.resources]
    operator = asking[0].name if asking else getattr(plan, "name", "?")
    request = (asking[0].resources.describe(resource) if asking else format_bytes(size))
    used = _used_bytes()
    what = f"it held {format_bytes(used)} when it asked for more" if used is not None else "it asked for more"
    error = DeviceMemoryExceeded(
        f"operator {operator!r} asked for {resource}: {request} (a limit of {format_bytes(size)} on "
        f"{resource} {address}); {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
        f"(ask for more memory in resources=, or use less)", operator=operator, requested=size, used=used)
    error.__cause__ = exc
    return error.with_traceback(exc.__traceback__)


def _used_bytes() -> int | None:
    """What the frameworks' allocators hold now, where they say."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            return int(cupy.get_default_memory_pool().used_bytes())
        except Exception:
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.cuda.memory_allocated(0))
        except Exception:
            pass
    return None
