"""A subtask's share of one device's memory: shares that add up.

A subtask holding a share of one device (``resources={"gpu": 0.5}``) may use that share of the
device's memory: its device frameworks are bounded to it (torch's
``set_per_process_memory_fraction``, CuPy's ``MemoryPool.set_limit(fraction=...)``), those it
imported before its operators open (a warm process's) at once and those its operators import
in ``open()`` right after. A model that holds more than the share once opened is an
``AllocationError`` (the share is too small for it: no restart helps); an out-of-memory error
later is a ``DeviceMemoryError`` naming the operator, its share and what it used. Either way
only this subtask fails: its neighbours on the device keep their own shares.

Example of the error::

    DeviceMemoryError: operator 'leaky' ran out of device memory on gpu 0: its share 1/2 of the
    device allows 40.0 GiB of 80.0 GiB and it held 39.9 GiB (OutOfMemoryError: ...)
"""

from __future__ import annotations

import logging
from fractions import Fraction

from accelflow._errors import AllocationError, DeviceMemoryError
from accelflow.runtime import (
    ChainPlan, SubtaskDescriptor, device_memory, is_out_of_memory, limit_device_memory, memory_text, share_for,
)

_log = logging.getLogger("accelflow.runtime")
_MIB = 2**20


class MemoryBound:
    """The bound of one subtask's share (a no-op where the subtask holds no one device)."""

    def __init__(self, operators: str = "", resource: str = "", address: str = "",
                 share: Fraction = Fraction(1), total: int | None = None) -> None:
        self.operators, self.resource, self.address, self.share = operators, resource, address, share
        self.total = total  # the device's memory in bytes, where its driver said
        self.bound = None if total is None else int(share * total)
        self.limited: list[str] = []

    @classmethod
    def of(cls, desc: SubtaskDescriptor, plan: ChainPlan) -> MemoryBound:
        held = [(resource, d) for resource, shares in desc.assigned.items() for d in shares]
        if len(held) != 1:
            return cls()
        resource, device = held[0]
        mib = device.properties.get("memory_total", "")
        names = [n.name for n in plan.nodes if resource in n.resources] or [n.name for n in plan.nodes]
        return cls(", ".join(repr(n) for n in names), resource, device.info().address, device.share,
                   int(mib) * _MIB if mib.isdigit() else None)

    def opening(self) -> None:
        """Bound the frameworks imported already (a warm process's), before ``open()``."""
        self._limit()

    def opened(self) -> None:
        """Bound the frameworks ``open()`` imported; raise if the share is too small already.

        Raises:
            AllocationError: the operators hold more device memory than the share allows.
        """
        self._limit()
        used = device_memory() if self.limited else None
        if used is not None and self.bound is not None and used > self.bound:
            raise AllocationError(
                f"operator {self.operators} holds {memory_text(used)} of device memory after open(), more "
                f"than its share {self.share} of {self.resource} {self.address} allows ({memory_text(self.bound)} "
                f"of {memory_text(self.total)}): ask for a larger share, e.g. "
                f"resources={{{self.resource!r}: {share_for(used, self.total)}}}")

    def _limit(self) -> None:
        if self.operators and self.share < 1:
            for name in limit_device_memory(float(self.share)):
                if name not in self.limited:
                    self.limited.append(name)
                    _log.debug("%s: %s bounded to %s of the device's memory", self.operators, name, self.share)

    def explain(self, exc: BaseException) -> BaseException:
        """``exc``, or the :class:`DeviceMemoryError` it is (a framework's out-of-memory)."""
        if not self.operators or not is_out_of_memory(exc):
            return exc
        used = device_memory()
        bound = "the whole device" if self.share >= 1 else (
            f"its share {self.share} of the device allows {memory_text(self.bound)} of {memory_text(self.total)}")
        error = DeviceMemoryError(
            f"operator {self.operators} ran out of device memory on {self.resource} {self.address}: {bound} "
            f"and it held {memory_text(used)} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
            operator=self.operators, share=str(self.share), bound=self.bound, used=used)
        error.__cause__ = exc
        return error
