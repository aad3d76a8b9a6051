"""What placement reads and returns: offers of free capacity, slot requests, assignments.

Shared by the incremental placement (:mod:`._index`), the plain reference
(:mod:`._reference`) and the explanations (:mod:`._explain`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from accelflow.scheduling._amounts import ResourceProfile
from accelflow.scheduling._ledger import DeviceKey, DeviceLedger

Policy = Literal["pack", "spread"]
#: per subtask (its ``holder``), the devices it would rather have, best first: soft, see
#: :func:`accelflow.scheduling.place`
Preferences = Mapping[Hashable, Sequence[DeviceKey]]
#: devices with an idle warm subtask process: among devices equally good, these first
Warm = Collection[DeviceKey]
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``"2"`` before ``"10"`` (Spark sorts them as strings)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


_NATURAL: dict[tuple[str, ...], tuple[str, ...]] = {}


def natural(addresses: tuple[str, ...]) -> tuple[str, ...]:
    """``addresses`` in natural order (cached: most TaskExecutors have the same addresses, and a
    search asks for the same ones again and again)."""
    known = _NATURAL.get(addresses)
    if known is None:
        if len(_NATURAL) > 4096:
            _NATURAL.clear()
        known = _NATURAL[addresses] = tuple(sorted(addresses, key=natural_key))
    return known


@dataclass(slots=True)
class TaskExecutorOffer:
    """Free capacity of one TaskExecutor: slots and each device's free share.

    Attributes:
        devices: per resource, each device's free share (a quarantined device's included).
        memory: per resource, each device whose memory is known: ``(free, total)`` bytes.
        quarantined: per resource, each quarantined device and why: it gets no new share.
    """

    id: str
    free_slots: int
    total_slots: int
    devices: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    memory: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    quarantined: dict[str, dict[str, str]] = field(default_factory=dict)

    def copy(self) -> TaskExecutorOffer:
        return TaskExecutorOffer(
            self.id, self.free_slots, self.total_slots,
            {r: dict(addresses) for r, addresses in self.devices.items()},
            {r: dict(addresses) for r, addresses in self.memory.items()},
            {r: dict(addresses) for r, addresses in self.quarantined.items()},
        )


@dataclass(frozen=True, slots=True)
class SubtaskRequest:
    """One subtask's device request; ``holder`` identifies it in the ledger."""

    holder: Hashable
    description: str
    profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """The subtasks that share one slot (subtask *i* of every chain)."""

    subtasks: tuple[SubtaskRequest, ...]


@dataclass(frozen=True, slots=True)
class SlotAssignment:
    """Where one slot request goes: its TaskExecutor, each subtask's device shares (``0`` for
    a device it takes memory of only) and, for devices whose memory is known, the bytes each
    subtask takes of them (only subtasks that take some are listed)."""

    taskexecutor: str
    shares: Mapping[Hashable, Mapping[DeviceKey, Fraction]]
    memory: Mapping[Hashable, Mapping[DeviceKey, int]] = field(default_factory=dict)


def largest_share(subtask: SubtaskRequest) -> tuple[Fraction, int]:
    """The order a slot's subtasks are fitted in (largest share first, then largest memory
    request: best-fit decreasing)."""
    profile = subtask.profile
    return max(profile.values(), default=Fraction(0)), max(profile.memory.values(), default=0)


def offer_from_ledger(
    ledger: DeviceLedger, taskexecutor: str, free_slots: int, total_slots: int, *, empty: bool = False
) -> TaskExecutorOffer:
    """What ``taskexecutor`` offers according to ``ledger``: each device's free share, memory
    and quarantine (``empty``: as if nothing ran, quarantines kept). O(its devices).

    Example:
        >>> ledger = DeviceLedger()
        >>> gpu0 = DeviceKey("te-1", "gpu", "0")
        >>> ledger.add_devices([gpu0], memory={gpu0: 2**30})
        >>> ledger.acquire("a", {gpu0: Fraction(0)}, memory={gpu0: 2**29})
        >>> offer_from_ledger(ledger, "te-1", 1, 2).memory
        {'gpu': {'0': (536870912, 1073741824)}}
    """
    offer = TaskExecutorOffer(taskexecutor, free_slots, total_slots)
    quarantined = ledger.quarantined()
    for d in ledger.devices_of(taskexecutor):
        offer.devices.setdefault(d.resource, {})[d.address] = Fraction(1) if empty else ledger.free(d)
        memory = ledger.memory(d)
        if memory is not None:
            offer.memory.setdefault(d.resource, {})[d.address] = (memory[1], memory[1]) if empty else memory
        if d in quarantined:
            offer.quarantined.setdefault(d.resource, {})[d.address] = quarantined[d]
    return offer
