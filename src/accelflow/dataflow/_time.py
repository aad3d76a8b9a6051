"""Event time's units: timestamps are epoch milliseconds (ints), as in PyFlink, and durations
are :class:`datetime.timedelta`; PyFlink's ``Time.seconds(5)`` / ``Duration.of_seconds(5)``
are accepted too, and so is a plain int of milliseconds. :func:`to_millis` normalises them all.

Example:
    >>> from datetime import timedelta
    >>> to_millis(timedelta(seconds=5), what="size"), to_millis(Time.seconds(5), what="size")
    (5000, 5000)
    >>> to_millis(Duration.of_minutes(1), what="gap"), to_millis(250, what="gap")
    (60000, 250)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from accelflow._errors import ConfigError

#: Java's ``Long.MIN_VALUE``: the watermark before any, and the "no timestamp" marker
MIN_TIMESTAMP = -(2**63)
#: Java's ``Long.MAX_VALUE``: the watermark at the end of a bounded input, a global window's end
MAX_TIMESTAMP = 2**63 - 1

_UNITS_MS = {"milliseconds": 1, "seconds": 1000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}


class Time:
    """PyFlink's ``pyflink.common.time.Time``: a span of milliseconds.

    Example:
        >>> Time.minutes(2).to_milliseconds()
        120000
    """

    __slots__ = ("_ms",)

    def __init__(self, milliseconds: int) -> None:
        self._ms = int(milliseconds)

    @staticmethod
    def milliseconds(n: int) -> Time:
        return Time(n)

    @staticmethod
    def seconds(n: int) -> Time:
        return Time(n * 1000)

    @staticmethod
    def minutes(n: int) -> Time:
        return Time(n * 60_000)

    @staticmethod
    def hours(n: int) -> Time:
        return Time(n * 3_600_000)

    @staticmethod
    def days(n: int) -> Time:
        return Time(n * 86_400_000)

    def to_milliseconds(self) -> int:
        return self._ms

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and other._ms == self._ms

    def __hash__(self) -> int:
        return hash(self._ms)

    def __repr__(self) -> str:
        return f"Time.milliseconds({self._ms})"


class Duration(Time):
    """PyFlink's ``pyflink.common.time.Duration`` (``Duration.of_seconds(5)``...).

    Example:
        >>> Duration.of_seconds(5).to_milliseconds()
        5000
    """

    __slots__ = ()

    @staticmethod
    def of_millis(n: int) -> Duration:
        return Duration(n)

    @staticmethod
    def of_seconds(n: int) -> Duration:
        return Duration(n * 1000)

    @staticmethod
    def of_minutes(n: int) -> Duration:
        return Duration(n * 60_000)

    @staticmethod
    def of_hours(n: int) -> Duration:
        return Duration(n * 3_600_000)

    @staticmethod
    def of_days(n: int) -> Duration:
        return Duration(n * 86_400_000)

    def __repr__(self) -> str:
        return f"Duration.of_millis({self._ms})"


def to_millis(value: Any, *, what: str) -> int:
    """``value`` (a ``timedelta``, a PyFlink ``Time``/``Duration`` or an int of milliseconds)
    in whole milliseconds (a ``timedelta`` is floored to the millisecond).

    Raises:
        ConfigError: naming ``what`` (e.g. ``TumblingEventTimeWindows.of(size)``) for any other
            value.
    """
    if isinstance(value, timedelta):
        return (value.days * 86_400 + value.seconds) * 1000 + value.microseconds // 1000
    if isinstance(value, Time):
        return value.to_milliseconds()
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(
        f"expected a duration: a datetime.timedelta (e.g. timedelta(seconds=5)), Time.seconds(5), "
        f"Duration.of_seconds(5) or an int of milliseconds, got {type(value).__name__} {value!r}",
        key=what)


def at_least(ms: int, minimum: int, *, what: str, shown: Any) -> int:
    """``ms`` when it is at least ``minimum``; else a :class:`ConfigError` naming ``what``."""
    if ms < minimum:
        unit = "1 ms" if minimum == 1 else f"{minimum} ms"
        raise ConfigError(f"must be at least {unit}, got {ms} ms ({shown!r})", key=what)
    return ms


__all__ = ["MAX_TIMESTAMP", "MIN_TIMESTAMP", "Duration", "Time", "at_least", "to_millis"]
