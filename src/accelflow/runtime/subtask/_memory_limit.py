"""Holding a subtask to its part of a device's memory: what it asked for
(``resources={"gpu": {"memory": ...}}``) or, without a request, its share of the device
(``resources={"gpu": 0.5}``: half of its memory). Shares then add up: a subtask that leaks
fails alone, its neighbours on the device keep their own parts.

The JobManager hands each subtask the bytes it holds of each device whose memory is known
(``SubtaskDescriptor.memory``: its request, else its share of the device's memory). The limit
goes to the frameworks' per-process limits on its first visible device (the device its
isolation makes ``cuda:0``):

* CuPy: ``CUPY_GPU_MEMORY_LIMIT`` before CuPy is imported (its default pool reads it), and the
  default pool's ``set_limit(size=...)`` where it is imported already (a warm process's);
* PyTorch: ``torch.cuda.set_per_process_memory_fraction(limit / total, 0)`` once ``torch`` is
  imported (by a warm process, or by the user's functions when they are unpickled or opened).

A model that holds more than its limit once opened is an ``AllocationError`` (no restart helps);
an allocation past the limit later raises the framework's ``OutOfMemoryError``, which
:func:`explain` turns into a :class:`~accelflow.DeviceMemoryExceeded` naming the operator, its
request or share, and what it held.

Example of the error::

    DeviceMemoryExceeded: operator 'leaky' asked for gpu: 0.5 (a limit of 40 GiB on gpu 0); it
    held 40 GiB when it asked for more: OutOfMemoryError: ... (ask for more memory in
    resources=, or use less)
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from accelflow._errors import AllocationError, DeviceMemoryExceeded
from accelflow.runtime import SubtaskDescriptor, device_memory, is_out_of_memory, share_for
from accelflow.scheduling import MEMORY_PROPERTY, format_bytes

CUPY_LIMIT_ENV_VAR = "CUPY_GPU_MEMORY_LIMIT"
_MIB = 1 << 20
_log = logging.getLogger("accelflow.runtime")


@dataclass(frozen=True, slots=True)
class Limit:
    """A subtask's limit on one device: ``size`` bytes of ``total`` (None: unknown)."""

    resource: str
    address: str
    size: int
    total: int | None


def limit_of(desc: SubtaskDescriptor) -> Limit | None:
    """The subtask's limit on its first device with one (its lowest address: the first the
    isolation makes visible), or ``None``."""
    for resource in sorted(desc.memory):
        held = desc.memory[resource]
        shares = {d.info().address: d for d in desc.assigned.get(resource, ())}
        for address in sorted(held, key=lambda a: (len(a), a)):
            total = _total(shares[address].properties) if address in shares else None
            return Limit(resource, address, held[address], total)
    return None


def _total(properties: Any) -> int | None:
    mib = properties.get(MEMORY_PROPERTY)
    return int(mib) * _MIB if mib and str(mib).isdigit() else None


def before_user_code(desc: SubtaskDescriptor) -> None:
    """Set what must be set before the user's code imports a framework (CuPy's variable)."""
    limit = limit_of(desc)
    if limit is not None:
        os.environ[CUPY_LIMIT_ENV_VAR] = str(limit.size)


def hold_frameworks(desc: SubtaskDescriptor) -> None:
    """Set the limit in the frameworks imported by now: before the operators open (a warm
    process imported them ahead) and after (the user's functions imported them)."""
    limit = limit_of(desc)
    if limit is None:
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().set_limit(size=limit.size)
        except Exception as exc:  # no CUDA here: nothing to hold
            _log.debug("CuPy's pool limit not set: %s", exc)
    torch = sys.modules.get("torch")
    if torch is not None and limit.total:
        try:
            if torch.cuda.is_available():
                torch.cuda.set_per_process_memory_fraction(min(1.0, limit.size / limit.total), 0)
        except Exception as exc:
            _log.debug("PyTorch's memory fraction not set: %s", exc)


def check_opened(desc: SubtaskDescriptor, plan: Any) -> None:
    """After ``open()``: the operators must fit their limit already.

    Raises:
        AllocationError: they hold more device memory than the limit allows.
    """
    limit = limit_of(desc)
    used = device_memory() if limit is not None else None
    if limit is None or used is None or used <= limit.size:
        return
    operator, asked = _asking(limit, plan)
    raise AllocationError(
        f"operator {operator!r} holds {format_bytes(used)} of device memory after open(), more than its "
        f"{asked} allows on {limit.resource} {limit.address} ({format_bytes(limit.size)}): ask for more, e.g. "
        f"resources={{{limit.resource!r}: {share_for(used, limit.total)}}} or a memory request")


def explain(exc: BaseException, desc: SubtaskDescriptor, plan: Any) -> BaseException:
    """``exc`` as a :class:`DeviceMemoryExceeded` when it is a framework's out-of-memory error
    in a subtask held to a limit; else ``exc``."""
    limit = limit_of(desc)
    if limit is None or not is_out_of_memory(exc):
        return exc
    operator, asked = _asking(limit, plan)
    used = device_memory()
    what = f"it held {format_bytes(used)} when it asked for more" if used is not None else "it asked for more"
    error = DeviceMemoryExceeded(
        f"operator {operator!r} asked for {asked} (a limit of {format_bytes(limit.size)} on {limit.resource} "
        f"{limit.address}); {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
        f"(ask for more memory in resources=, or use less)", operator=operator, requested=limit.size, used=used)
    error.__cause__ = exc
    return error.with_traceback(exc.__traceback__)


def _asking(limit: Limit, plan: Any) -> tuple[str, str]:
    """The operator whose request ``limit`` is, and that request in words (``gpu: 0.5``)."""
    nodes = list(getattr(plan, "nodes", ()))
    asking = [n for n in nodes if limit.resource in n.resources.memory] or [
        n for n in nodes if limit.resource in n.resources]
    operator = asking[0].name if asking else getattr(plan, "name", "?")
    return operator, f"{limit.resource}: " + (asking[0].resources.describe(limit.resource) if asking
                                              else format_bytes(limit.size))
