"""What placement reads and returns: offers of free capacity, slot requests, assignments.

Shared by the incremental placement (:mod:`._index`), the plain reference
(:mod:`._reference`) and the explanations (:mod:`._explain`).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from accelflow.scheduling._amounts import ResourceProfile
from accelflow.scheduling._ledger import DeviceKey

Policy = Literal["pack", "spread"]
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``"2"`` before ``"10"`` (Spark sorts them as strings)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


@dataclass(slots=True)
class TaskExecutorOffer:
    """Free capacity of one TaskExecutor: slots and each device's free share."""

    id: str
    free_slots: int
    total_slots: int
    devices: dict[str, dict[str, Fraction]] = field(default_factory=dict)

    def copy(self) -> TaskExecutorOffer:
        return TaskExecutorOffer(
            self.id, self.free_slots, self.total_slots,
            {r: dict(addresses) for r, addresses in self.devices.items()},
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
    taskexecutor: str
    shares: Mapping[Hashable, Mapping[DeviceKey, Fraction]]


def largest_share(subtask: SubtaskRequest) -> Fraction:
    """The order a slot's subtasks are fitted in (largest first, best-fit decreasing)."""
    return max(subtask.profile.values(), default=Fraction(0))
