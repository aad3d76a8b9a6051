"""Watermarks in a subtask: the generator side (timestamps and periodic watermarks from a
``WatermarkStrategy``, idleness) and the input side (Flink's ``StatusWatermarkValve``: the
minimum over the active inputs, monotonic, idle inputs skipped).

Both are pure: driven by calls, with the time passed in.

Example:
    >>> valve = StatusWatermarkValve(2)
    >>> valve.input_watermark(10, 0), valve.input_watermark(7, 1), valve.input_watermark(12, 1)
    ([], [Watermark(timestamp=7)], [Watermark(timestamp=10)])
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import MAX_TIMESTAMP, MIN_TIMESTAMP, WatermarkStrategy
from accelflow.runtime import Watermark


class WatermarkStatus(Enum):
    """An input is ``ACTIVE`` or ``IDLE`` (ignored by the downstream minimum)."""

    ACTIVE = "active"
    IDLE = "idle"


#: what a valve or a generator emits: a new watermark or a status change
Event = Watermark | WatermarkStatus


class StatusWatermarkValve:
    """Combines the watermarks and statuses of ``channels`` inputs into one stream of them.

    The output watermark is the minimum over the *aligned* active inputs (an input that was
    idle must catch up with the output before it counts again), never goes back, and when
    every input is idle the largest input watermark is flushed and ``IDLE`` emitted.
    """

    def __init__(self, channels: int) -> None:
        self.watermarks = [MIN_TIMESTAMP] * channels
        self.idle = [False] * channels
        self.aligned = [True] * channels
        self.output = MIN_TIMESTAMP
        self.output_idle = False

    def input_watermark(self, timestamp: int, channel: int) -> list[Event]:
        """Input ``channel`` says ``timestamp``; returns what the valve emits (maybe nothing)."""
        if self.output_idle or self.idle[channel] or timestamp <= self.watermarks[channel]:
            return []
        self.watermarks[channel] = timestamp
        if not self.aligned[channel] and timestamp >= self.output:
            self.aligned[channel] = True
        return self._new_min()

    def input_watermark_status(self, status: WatermarkStatus, channel: int) -> list[Event]:
        """Input ``channel`` became ``status``; returns what the valve emits."""
        if status is WatermarkStatus.IDLE and not self.idle[channel]:
            self.idle[channel] = True
            self.aligned[channel] = False
            if all(self.idle):
                out: list[Event] = []
                if self.watermarks[channel] == self.output:
                    out += self._flush_max()
                self.output_idle = True
                return out + [WatermarkStatus.IDLE]
            return self._new_min() if self.watermarks[channel] == self.output else []
        if status is WatermarkStatus.ACTIVE and self.idle[channel]:
            self.idle[channel] = False
            if self.watermarks[channel] >= self.output:
                self.aligned[channel] = True
            if self.output_idle:
                self.output_idle = False
                return [WatermarkStatus.ACTIVE]
        return []

    def _new_min(self) -> list[Event]:
        aligned = [w for w, a in zip(self.watermarks, self.aligned) if a]
        if aligned and min(aligned) > self.output:
            self.output = min(aligned)
            return [Watermark(self.output)]
        return []

    def _flush_max(self) -> list[Event]:
        top = max(self.watermarks)
        if top > self.output:
            self.output = top
            return [Watermark(top)]
        return []

    def snapshot(self) -> dict[str, Any]:
        return {"watermarks": list(self.watermarks), "output": self.output}

    def restore(self, state: dict[str, Any]) -> None:
        """Take back the per-input watermarks of the same number of inputs."""
        if len(state["watermarks"]) == len(self.watermarks):
            self.watermarks = list(state["watermarks"])
        self.output = state["output"]


class IdlenessTimer:
    """Flink's ``WatermarksWithIdleness.IdlenessTimer``: idle once ``timeout_ms`` passed with no
    activity between two checks (the clock only moves forward; times in ms)."""

    def __init__(self, timeout_ms: int) -> None:
        if timeout_ms <= 0:
            raise ValueError("idle timeout must be greater than 0")
        self.timeout_ms = timeout_ms
        self.counter = self.last_counter = 0
        self.inactive_since: int | None = None

    def activity(self) -> None:
        self.counter += 1

    def check_if_idle(self, now_ms: int) -> bool:
        if self.counter != self.last_counter:
            self.last_counter = self.counter
            self.inactive_since = None
            return False
        if self.inactive_since is None:
            self.inactive_since = now_ms
            return False
        return now_ms - self.inactive_since > self.timeout_ms


class TimestampsAndWatermarks:
    """Runs a ``WatermarkStrategy`` for one subtask: :meth:`process_element` gives each record
    its timestamp, :meth:`on_periodic_emit` (every ``pipeline.auto-watermark-interval``) the
    watermark ``max_timestamp - delay - 1`` when it advanced, or ``IDLE`` after the idle
    timeout, and ``ACTIVE`` again with the next record.

    Example:
        >>> from accelflow.dataflow.eventtime import WatermarkStrategy
        >>> gen = TimestampsAndWatermarks(WatermarkStrategy.for_bounded_out_of_orderness(10)
        ...                               .with_timestamp_assigner(lambda v, ts: v), "assign")
        >>> gen.process_element(1337)
        (1337, [])
        >>> gen.on_periodic_emit(now_ms=0)
        [Watermark(timestamp=1326)]
    """

    def __init__(self, strategy: WatermarkStrategy, operator: str) -> None:
        self.strategy = strategy
        self.operator = operator
        self.max_timestamp = MIN_TIMESTAMP + strategy.max_out_of_orderness_ms + 1
        self.emitted = MIN_TIMESTAMP
        self.idle = False
        self.timer = IdlenessTimer(strategy.idle_timeout_ms) if strategy.idle_timeout_ms else None

    def process_element(self, value: Any, record_timestamp: int | None = None) -> tuple[int, list[Event]]:
        """``value``'s timestamp, and ``ACTIVE`` when the input was idle until now."""
        timestamp = self._extract(value, MIN_TIMESTAMP if record_timestamp is None else record_timestamp)
        self.max_timestamp = max(self.max_timestamp, timestamp)
        events: list[Event] = []
        if self.timer is not None:
            self.timer.activity()
            if self.idle:
                self.idle = False
                events.append(WatermarkStatus.ACTIVE)
        return timestamp, events

    def process_chunk(self, values: list[Any], record_timestamps: np.ndarray[Any, Any] | None) -> tuple[Any, list[Event]]:
        """:meth:`process_element` of each of ``values`` in turn (``record_timestamps``: their
        own, int64 with ``MIN_TIMESTAMP`` for none, or ``None``): their timestamps (an int64
        array, or the record timestamps themselves without an assigner) and the events.

        Example:
            >>> from accelflow.dataflow.eventtime import WatermarkStrategy
            >>> gen = TimestampsAndWatermarks(WatermarkStrategy.for_monotonous_timestamps()
            ...                               .with_timestamp_assigner(lambda v, ts: v), "assign")
            >>> stamps, events = gen.process_chunk([5, 3, 9], None)
            >>> stamps.tolist(), events, gen.max_timestamp
            ([5, 3, 9], [], 9)
        """
        n = len(values)
        own = record_timestamps if record_timestamps is not None else np.full(n, MIN_TIMESTAMP, np.int64)
        assigner = self.strategy.timestamp_assigner
        if assigner is None:
            stamps = own
        else:
            extract = assigner.extract_timestamp
            out = [extract(value, t) for value, t in zip(values, own.tolist())]
            for value, timestamp in zip(values, out):
                if type(timestamp) is not int:
                    self._checked(timestamp, value)
            stamps = np.array(out, np.int64)
        if n:
            self.max_timestamp = max(self.max_timestamp, int(stamps.max()))
        events: list[Event] = []
        if self.timer is not None and n:
            self.timer.activity()
            if self.idle:
                self.idle = False
                events.append(WatermarkStatus.ACTIVE)
        return stamps, events

    def _checked(self, timestamp: Any, value: Any) -> int:
        """``timestamp`` if it is an int of epoch milliseconds, else the error naming ``value``."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            assigner = self.strategy.timestamp_assigner
            raise JobError(
                f"operator {self.operator!r}: the timestamp assigner {type(assigner).__name__} returned "
                f"{type(timestamp).__name__} {timestamp!r} for {value!r}; it must return the event time "
                "as an int of epoch milliseconds")
        return timestamp

    def _extract(self, value: Any, record_timestamp: int) -> int:
        assigner = self.strategy.timestamp_assigner
        if assigner is None:
            return record_timestamp
        return self._checked(assigner.extract_timestamp(value, record_timestamp), value)

    def current_watermark(self) -> int:
        return self.max_timestamp - self.strategy.max_out_of_orderness_ms - 1

    def on_periodic_emit(self, now_ms: int) -> list[Event]:
        """The periodic tick; ``now_ms`` is the processing time (for idleness)."""
        if self.strategy.kind == "none":
            return []
        if self.timer is not None and self.timer.check_if_idle(now_ms):
            if self.idle:
                return []
            self.idle = True
            return [WatermarkStatus.IDLE]
        watermark = self.current_watermark()
        if watermark > self.emitted:
            self.emitted = watermark
            return [Watermark(watermark)]
        return []

    def end_of_input(self) -> list[Event]:
        """A bounded input ended: the final ``MAX_TIMESTAMP`` watermark (fires every window)."""
        self.emitted = MAX_TIMESTAMP
        return [Watermark(MAX_TIMESTAMP)]

    def snapshot(self) -> dict[str, int]:
        return {"max_timestamp": self.max_timestamp, "emitted": self.emitted}

    def restore(self, states: list[dict[str, int]]) -> None:
        """Resume from the states of every subtask before (any parallelism): the smallest one,
        so that no record any of them still had to send becomes late by the restore."""
        if states:
            self.max_timestamp = min(s["max_timestamp"] for s in states)
            self.emitted = min(s["emitted"] for s in states)


class _Split:
    """One split's part of :class:`SplitWatermarks`: its largest timestamp and idleness."""

    def __init__(self, strategy: WatermarkStrategy) -> None:
        self.max_timestamp = MIN_TIMESTAMP + strategy.max_out_of_orderness_ms + 1
        self.timer = IdlenessTimer(strategy.idle_timeout_ms) if strategy.idle_timeout_ms else None
        self.idle = False

    def seen(self, timestamp: int) -> None:
        self.max_timestamp = max(self.max_timestamp, timestamp)
        self.idle = False
        if self.timer is not None:
            self.timer.activity()


class SplitWatermarks(TimestampsAndWatermarks):
    """:class:`TimestampsAndWatermarks` per split of a source (Flink's per-split watermarks,
    e.g. per Kafka partition): each split the source says it reads has its own largest
    timestamp and idleness, and the watermark is the minimum over the splits not idle, so a
    split that lags behind another of the same subtask keeps its records on time. It never
    goes back: a split that starts (or comes back from idle) behind holds it until it
    catches up. The subtask is idle when every split is. Records of no split (a source that
    does not say) make the one watermark of :class:`TimestampsAndWatermarks`.

    Example:
        >>> from accelflow.dataflow.eventtime import WatermarkStrategy
        >>> gen = SplitWatermarks(WatermarkStrategy.for_bounded_out_of_orderness(10)
        ...                       .with_timestamp_assigner(lambda v, ts: v), "assign")
        >>> _ = gen.process_chunk([5000, 1000], None, ([0, 1], ("p0", "p1")))
        >>> gen.on_periodic_emit(now_ms=0)  # the lagging p1's: 1000 - 10 - 1
        [Watermark(timestamp=989)]
    """

    def __init__(self, strategy: WatermarkStrategy, operator: str) -> None:
        super().__init__(strategy, operator)
        self.splits: dict[Any, _Split] = {}

    def process_chunk(self, values: list[Any], record_timestamps: np.ndarray[Any, Any] | None,
                      splits: tuple[Any, tuple[Any, ...]] | None = None) -> tuple[Any, list[Event]]:
        """As :meth:`TimestampsAndWatermarks.process_chunk`; ``splits``: ``(indices,
        names)``, record *i* from split ``names[indices[i]]``, ``names`` every split being
        read (a new one starts at no watermark; one no longer named is done, and stops
        counting, as a finished split in Flink)."""
        stamps, events = super().process_chunk(values, record_timestamps)
        if splits is not None and len(values):
            indices, names = np.asarray(splits[0], np.int64), splits[1]
            self.splits = {name: self.splits.get(name) or _Split(self.strategy) for name in names}
            largest = np.full(len(names), MIN_TIMESTAMP, np.int64)
            np.maximum.at(largest, indices, stamps)
            for i in np.unique(indices).tolist():
                self.splits[names[i]].seen(int(largest[i]))
        return stamps, events

    def current_watermark(self) -> int:
        """The minimum over the splits not idle (of the whole input without splits)."""
        if not self.splits:
            return super().current_watermark()
        delay = self.strategy.max_out_of_orderness_ms
        active = [s.max_timestamp - delay - 1 for s in self.splits.values() if not s.idle]
        return min(active, default=MIN_TIMESTAMP)

    def on_periodic_emit(self, now_ms: int) -> list[Event]:
        """Each split's idleness first (an idle split stops counting), then the subtask's."""
        for split in self.splits.values():
            if split.timer is not None and split.timer.check_if_idle(now_ms):
                split.idle = True
        return super().on_periodic_emit(now_ms)

    def snapshot(self) -> dict[str, int]:
        """As :class:`TimestampsAndWatermarks`'s, but with splits the largest timestamp is the
        one of the watermark sent: the splits are not kept (as in Flink, they start again from
        the records read after a restore), and what the restored subtask sends before it
        knows its splits again must not pass a lagging split's watermark."""
        state = super().snapshot()
        if self.splits:
            state["max_timestamp"] = min(self.max_timestamp, self.emitted + self.strategy.max_out_of_orderness_ms + 1)
        return state


__all__ = ["Event", "IdlenessTimer", "SplitWatermarks", "StatusWatermarkValve", "TimestampsAndWatermarks", "Watermark", "WatermarkStatus"]
