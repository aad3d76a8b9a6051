"""An operator's timers (Flink's ``InternalTimerServiceImpl``): event-time and processing-time
timers per (key, namespace), one per timestamp (registering it again changes nothing), fired
in timestamp order (then in the order they were registered) when the watermark or the
processing time reaches them; a timer registered while others fire fires in the same advance
if it is due. Snapshots are per key group, so timers move with their keys on rescale.

Example:
    >>> timers = InternalTimerService()
    >>> timers.register_event_time_timer("k", None, 20); timers.register_event_time_timer("k", None, 10)
    >>> [(t.timestamp, t.key) for t in timers.advance_watermark(15)]
    [(10, 'k')]
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any, NamedTuple

from accelflow.dataflow.eventtime import MIN_TIMESTAMP
from accelflow.runtime.subtask._keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange, key_group_of


class InternalTimer(NamedTuple):
    """A timer: when, for which key and which namespace (a window, or ``None``)."""

    timestamp: int
    key: Any
    namespace: Any


class _TimerQueue:
    """Timers of one time domain: a heap ordered by (timestamp, registration order) and the
    set of live ones (a deleted timer stays in the heap until it surfaces)."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, InternalTimer]] = []
        self.live: dict[InternalTimer, int] = {}  # timer -> its sequence number
        self.seq = 0

    def add(self, timer: InternalTimer) -> None:
        if timer not in self.live:
            self.seq += 1
            self.live[timer] = self.seq
            heapq.heappush(self.heap, (timer.timestamp, self.seq, timer))

    def remove(self, timer: InternalTimer) -> None:
        self.live.pop(timer, None)

    def peek(self) -> InternalTimer | None:
        while self.heap and self.live.get(self.heap[0][2]) != self.heap[0][1]:
            heapq.heappop(self.heap)  # deleted (or deleted and registered again later)
        return self.heap[0][2] if self.heap else None

    def poll_due(self, time: int) -> InternalTimer | None:
        head = self.peek()
        if head is None or head.timestamp > time:
            return None
        heapq.heappop(self.heap)
        del self.live[head]
        return head

    def __iter__(self) -> Iterator[InternalTimer]:
        return iter(sorted(self.live, key=self.live.__getitem__))


class InternalTimerService:
    """Timers of one operator; the caller passes the current key (``canonical_key``'d)."""

    def __init__(self, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> None:
        self.max_parallelism = max_parallelism
        self.event = _TimerQueue()
        self.processing = _TimerQueue()
        self.watermark = MIN_TIMESTAMP
        self.processing_time = MIN_TIMESTAMP

    def reset(self) -> None:
        """No timer, no watermark, no processing time: as new."""
        self.event, self.processing = _TimerQueue(), _TimerQueue()
        self.watermark = self.processing_time = MIN_TIMESTAMP

    def register_event_time_timer(self, key: Any, namespace: Any, timestamp: int) -> None:
        self.event.add(InternalTimer(timestamp, key, namespace))

    def register_processing_time_timer(self, key: Any, namespace: Any, timestamp: int) -> None:
        self.processing.add(InternalTimer(timestamp, key, namespace))

    def delete_event_time_timer(self, key: Any, namespace: Any, timestamp: int) -> None:
        self.event.remove(InternalTimer(timestamp, key, namespace))

    def delete_processing_time_timer(self, key: Any, namespace: Any, timestamp: int) -> None:
        self.processing.remove(InternalTimer(timestamp, key, namespace))

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self.processing_time

    def advance_watermark(self, watermark: int) -> Iterator[InternalTimer]:
        """Sets the watermark and yields each due event-time timer in order; the caller handles
        each (it may register more) before asking for the next."""
        self.watermark = max(self.watermark, watermark)
        while (timer := self.event.poll_due(self.watermark)) is not None:
            yield timer

    def advance_processing_time(self, now: int) -> Iterator[InternalTimer]:
        """Sets the processing time and yields each due processing-time timer in order."""
        self.processing_time = max(self.processing_time, now)
        while (timer := self.processing.poll_due(self.processing_time)) is not None:
            yield timer

    def next_processing_time(self) -> int | None:
        """When the earliest processing-time timer is due (the one physical timer a runner
        schedules), or ``None``."""
        head = self.processing.peek()
        return None if head is None else head.timestamp

    def num_event_time_timers(self, namespace: Any = ...) -> int:
        return sum(1 for t in self.event.live if namespace is ... or t.namespace == namespace)

    def num_processing_time_timers(self, namespace: Any = ...) -> int:
        return sum(1 for t in self.processing.live if namespace is ... or t.namespace == namespace)

    def snapshot(self) -> dict[int, dict[str, list[tuple[int, Any, Any]]]]:
        """The live timers per key group: ``{group: {"event": [...], "processing": [...]}}``,
        each timer ``(timestamp, key, namespace)`` in registration order."""
        groups: dict[int, dict[str, list[tuple[int, Any, Any]]]] = {}
        for domain, queue in (("event", self.event), ("processing", self.processing)):
            for timer in queue:
                group = groups.setdefault(key_group_of(timer.key, self.max_parallelism), {"event": [], "processing": []})
                group[domain].append(tuple(timer))  # type: ignore[arg-type]
        return groups

    def restore(self, groups: dict[int, Any], key_groups: KeyGroupRange, canonical: Any = None) -> None:
        """Adds the timers of the key groups in ``key_groups`` from ``groups`` (a snapshot's,
        or several merged); ``canonical`` makes unpickled keys canonical (NaN)."""
        for group, timers in groups.items():
            if group not in key_groups:
                continue
            for timestamp, key, namespace in timers["event"]:
                self.event.add(InternalTimer(timestamp, canonical(key) if canonical else key, namespace))
            for timestamp, key, namespace in timers["processing"]:
                self.processing.add(InternalTimer(timestamp, canonical(key) if canonical else key, namespace))


__all__ = ["InternalTimer", "InternalTimerService"]
