"""State time-to-live (Flink's ``AbstractTtlDecorator``): each TTL'd entry is stored with the
processing time of its last write (or read, with ``OnReadAndWrite``) and is expired once
``last + ttl <= now``. An expired entry is removed when it is accessed; with
``ReturnExpiredIfNotCleanedUp`` that access still returns it, once.

Example:
    >>> from accelflow.dataflow.eventtime import StateTtlConfig
    >>> now = [0]
    >>> ttl = Ttl(StateTtlConfig.new_builder(100).build(), lambda: now[0])
    >>> stamped = ttl.stamp("v"); now[0] = 100
    >>> ttl.expired(stamped)
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from accelflow.dataflow.eventtime import StateTtlConfig


class Stamped(NamedTuple):
    """A TTL'd value and the processing time (ms) it was last written (or read)."""

    value: Any
    timestamp: int


class Ttl:
    """The TTL rules of one state, against ``clock`` (processing time in ms)."""

    def __init__(self, config: StateTtlConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.ttl_ms = config.ttl_ms
        self.update_on_read = config.update_type is StateTtlConfig.UpdateType.OnReadAndWrite
        self.return_expired = config.state_visibility is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp

    def stamp(self, value: Any) -> Stamped:
        return Stamped(value, self.clock())

    def expired(self, stamped: Stamped, now: int | None = None) -> bool:
        return stamped.timestamp + self.ttl_ms <= (self.clock() if now is None else now)

    def read(self, stamped: Stamped) -> tuple[bool, bool, Stamped]:
        """``(visible, keep, stored)`` for a read of ``stamped``: whether the reader sees it,
        whether it stays stored, and what to store (restamped on read where configured)."""
        if self.expired(stamped):
            return self.return_expired, False, stamped
        return True, True, self.stamp(stamped.value) if self.update_on_read else stamped

    def unexpired(self, stamped: Stamped, now: int) -> bool:
        return not self.expired(stamped, now)


def drop_expired(stored: Any, kind: str, ttl: Ttl, now: int) -> Any:
    """``stored`` (a state's stored value) without its expired parts, or ``None`` when nothing
    is left: the ``cleanup_full_snapshot`` and incremental cleanup filter."""
    if kind == "list":
        kept = [s for s in stored if ttl.unexpired(s, now)]
        return kept or None
    if kind == "map":
        left = {k: s for k, s in stored.items() if ttl.unexpired(s, now)}
        return left or None
    return stored if ttl.unexpired(stored, now) else None


__all__ = ["Stamped", "Ttl", "drop_expired"]
