"""``WatermarkStrategy`` and ``TimestampAssigner``, as in PyFlink: how a stream's records get
their event timestamps and how its watermarks are made. The strategy only describes; the
runtime's generator (``runtime/subtask/_watermarks.py``) runs it.

Example:
    >>> from datetime import timedelta
    >>> class SecondField(TimestampAssigner):
    ...     def extract_timestamp(self, value, record_timestamp):
    ...         return value[1]
    >>> strategy = (WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
    ...             .with_timestamp_assigner(SecondField())
    ...             .with_idleness(timedelta(minutes=1)))
    >>> strategy.max_out_of_orderness_ms, strategy.idle_timeout_ms
    (5000, 60000)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow._time import at_least, to_millis


class TimestampAssigner(ABC):
    """Extracts a record's event timestamp (epoch milliseconds, an int)."""

    @abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """The event timestamp of ``value``; ``record_timestamp`` is the one it already has
        (a Kafka record's timestamp), or ``MIN_TIMESTAMP`` where it has none."""


class _CallableAssigner(TimestampAssigner):
    """A plain function ``fn(value, record_timestamp)`` as an assigner."""

    def __init__(self, fn: Callable[[Any, int], int]) -> None:
        self.fn = fn

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return self.fn(value, record_timestamp)


class WatermarkStrategy:
    """PyFlink's ``WatermarkStrategy``: immutable; each ``with_*`` returns a new one.

    Attributes:
        kind: ``"bounded"`` (periodic watermarks ``max_ts - delay - 1``) or ``"none"``.
        max_out_of_orderness_ms: the delay of a bounded strategy (0 for monotonous timestamps).
        timestamp_assigner: the assigner, or ``None`` to keep each record's own timestamp.
        idle_timeout_ms: after this long without records the input is marked idle; ``None``:
            never.
    """

    def __init__(self, kind: str, max_out_of_orderness_ms: int = 0,
                 timestamp_assigner: TimestampAssigner | None = None,
                 idle_timeout_ms: int | None = None) -> None:
        self.kind = kind
        self.max_out_of_orderness_ms = max_out_of_orderness_ms
        self.timestamp_assigner = timestamp_assigner
        self.idle_timeout_ms = idle_timeout_ms

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Any) -> WatermarkStrategy:
        """Watermarks that lag the largest timestamp seen by ``max_out_of_orderness``."""
        what = "WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness)"
        ms = at_least(to_millis(max_out_of_orderness, what=what), 0, what=what, shown=max_out_of_orderness)
        return WatermarkStrategy("bounded", ms)

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """For ascending timestamps: the watermark is the largest timestamp seen, minus 1 ms."""
        return WatermarkStrategy("bounded", 0)

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        """Timestamps only, never a watermark (processing-time jobs)."""
        return WatermarkStrategy("none")

    def with_timestamp_assigner(self, timestamp_assigner: Any) -> WatermarkStrategy:
        """A copy that takes timestamps from ``timestamp_assigner``: a :class:`TimestampAssigner`
        or a function ``fn(value, record_timestamp) -> int``."""
        if isinstance(timestamp_assigner, TimestampAssigner):
            assigner = timestamp_assigner
        elif callable(timestamp_assigner):
            assigner = _CallableAssigner(timestamp_assigner)
        else:
            raise ConfigError(
                f"needs a TimestampAssigner or a function (value, record_timestamp) -> int, got "
                f"{type(timestamp_assigner).__name__}", key="WatermarkStrategy.with_timestamp_assigner")
        return WatermarkStrategy(self.kind, self.max_out_of_orderness_ms, assigner, self.idle_timeout_ms)

    def with_idleness(self, idle_timeout: Any) -> WatermarkStrategy:
        """A copy that marks its input idle after ``idle_timeout`` without records, so that
        downstream watermarks advance without it (Flink's ``withIdleness``)."""
        what = "WatermarkStrategy.with_idleness(idle_timeout)"
        ms = at_least(to_millis(idle_timeout, what=what), 1, what=what, shown=idle_timeout)
        return WatermarkStrategy(self.kind, self.max_out_of_orderness_ms, self.timestamp_assigner, ms)

    def __repr__(self) -> str:
        return (f"WatermarkStrategy(kind={self.kind!r}, max_out_of_orderness_ms="
                f"{self.max_out_of_orderness_ms}, idle_timeout_ms={self.idle_timeout_ms})")


__all__ = ["TimestampAssigner", "WatermarkStrategy"]
