"""The window join and co-group of two streams (PyFlink's ``JoinedStreams`` and
``CoGroupedStreams``): ``a.join(b).where(key_a).equal_to(key_b).window(assigner)
.apply(JoinFunction)``, and ``a.co_group(b)...apply(CoGroupFunction)``.

Built as Flink builds them: each side's records tagged with their input, the two streams
united, keyed by the key selectors and windowed; the window function splits a window's
records by input again. So checkpoints, rescaling, event and processing time, triggers and
allowed lateness are a keyed window's.

Example:
    >>> from accelflow.dataflow.eventtime import Time, TumblingEventTimeWindows, WatermarkStrategy
    >>> at = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, ts: r[2])
    >>> env = Environment()
    >>> users = env.from_elements((1, "ann", 10), (2, "bob", 20)).assign_timestamps_and_watermarks(at)
    >>> orders = env.from_elements((1, "tea", 30), (1, "jam", 1500)).assign_timestamps_and_watermarks(at)
    >>> sorted(users.join(orders).where(lambda u: u[0]).equal_to(lambda o: o[0])
    ...        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
    ...        .apply(lambda u, o: (u[1], o[1])).execute_and_collect())
    [('ann', 'tea')]
"""

from __future__ import annotations

from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow import CoGroupWindow, JoinCoGroup, TaggedKey, Tagger
from accelflow.dataflow.eventtime import WindowAssigner
from accelflow.api._environment import Environment
from accelflow.api._keyed import WindowedStream
from accelflow.api._names import shown
from accelflow.api._stream import DataStream


class CoGroupedStreams:
    """``first.co_group(second)``: set the keys with :meth:`where` and ``equal_to``, then
    ``window(assigner)`` and ``apply(CoGroupFunction)``, which gets, per key and window, the
    window's records of each stream (either may be empty)."""

    _what = "co_group"

    def __init__(self, first: DataStream, second: DataStream) -> None:
        self.first = first
        self.second = second

    def where(self, key_selector: Any, key_type: Any = None) -> Where:
        """The key of the first stream's records: ``key_selector(record)`` (or a ``KeySelector``)."""
        return Where(self, _selector(key_selector, f"{self._what}(...).where()"), key_type)

    def equal_to(self, key_selector: Any, key_type: Any = None) -> Any:
        raise _missing(self._what, "where(key_selector)", "equal_to")

    def window(self, assigner: Any) -> Any:
        raise _missing(self._what, "where(key_selector).equal_to(key_selector)", "window")

    def apply(self, function: Any, output_type: Any = None, **kwargs: Any) -> Any:
        raise _missing(self._what, "where(key_selector).equal_to(key_selector).window(assigner)", "apply")


class JoinedStreams(CoGroupedStreams):
    """``first.join(second)``: as :class:`CoGroupedStreams`, and ``apply(JoinFunction)`` gets
    each pair of a window's records with equal keys, one from each stream (an inner join: a
    window where one stream has no record of the key gives nothing)."""

    _what = "join"


class Where:
    """The first stream's key is set: :meth:`equal_to` sets the second's."""

    def __init__(self, streams: CoGroupedStreams, key_selector: Any, key_type: Any) -> None:
        self.streams = streams
        self.key_selector = key_selector
        self.key_type = key_type

    def equal_to(self, key_selector: Any, key_type: Any = None) -> EqualTo:
        """The key of the second stream's records; it must be of the first key's type (as Flink)."""
        what = self.streams._what
        selector = _selector(key_selector, f"{what}(...).equal_to()")
        if self.key_type is not None and key_type is not None and self.key_type != key_type:
            raise ConfigError(f"the key types of the two inputs differ: where() has {self.key_type!r}, equal_to() "
                              f"has {key_type!r}; Flink requires one key type: use the same for both",
                              key=f"{what}(...).equal_to()")
        return EqualTo(self.streams, self.key_selector, selector)

    def window(self, assigner: Any) -> Any:
        raise _missing(self.streams._what, "equal_to(key_selector)", "window")

    def apply(self, function: Any, output_type: Any = None, **kwargs: Any) -> Any:
        raise _missing(self.streams._what, "equal_to(key_selector).window(assigner)", "apply")


class EqualTo:
    """Both keys are set: :meth:`window` sets the windows."""

    def __init__(self, streams: CoGroupedStreams, first_key: Any, second_key: Any) -> None:
        self.streams = streams
        self.keys = (first_key, second_key)

    def window(self, assigner: WindowAssigner) -> WithWindow:
        """The windows both streams' records meet in, e.g. ``TumblingEventTimeWindows.of(...)``."""
        if not isinstance(assigner, WindowAssigner):
            raise ConfigError(f"window() needs a WindowAssigner (e.g. TumblingEventTimeWindows.of(Time.seconds(5))), "
                              f"got {shown(assigner)}", key=f"{self.streams._what}(...).window()")
        return WithWindow(self.streams, self.keys, assigner)

    def apply(self, function: Any, output_type: Any = None, **kwargs: Any) -> Any:
        raise _missing(self.streams._what, "window(assigner)", "apply")


class WithWindow:
    """A join or co-group with its keys and windows: optionally set :meth:`trigger` and
    :meth:`allowed_lateness`, then :meth:`apply` the function."""

    def __init__(self, streams: CoGroupedStreams, keys: tuple[Any, Any], assigner: WindowAssigner) -> None:
        self.streams = streams
        self.keys = keys
        self.assigner = assigner
        self._trigger: Any = None
        self._lateness: Any = 0

    def trigger(self, trigger: Any) -> WithWindow:
        """When a window fires (default: the assigner's, e.g. at the watermark for event time)."""
        self._trigger = trigger
        return self

    def allowed_lateness(self, time_ms: Any) -> WithWindow:
        """Keep each window this long after its end (ms, or a ``timedelta``): late records
        within it fire the window again, with all its records."""
        self._lateness = time_ms
        return self

    def evictor(self, evictor: Any) -> WithWindow:
        raise ConfigError("evictors are not supported yet: drop elements in the join or co-group function",
                          key=f"{self.streams._what}(...).evictor()")

    def apply(self, function: Any, output_type: Any = None, *, name: str | None = None,
              parallelism: int | None = None) -> DataStream:
        """Run ``function`` on every window: a ``JoinFunction`` (``join(value1, value2)``, or a
        function of the two) for a join, a ``CoGroupFunction`` (``co_group(first, second,
        collector)``) for a co-group. Results carry their window's ``max_timestamp()``."""
        what = self.streams._what
        name = name or what
        method = "join" if what == "join" else "co_group"
        if not (callable(getattr(function, method, None)) or callable(function)):
            raise ConfigError(f"apply() needs a {'JoinFunction' if method == 'join' else 'CoGroupFunction'} "
                              f"(an object with {method}() or a function), got {shown(function)}",
                              key=f"operator {name!r}")
        co_group = JoinCoGroup(function) if method == "join" else function
        first, second = self.streams.first, self.streams.second
        tagged = [s.map(Tagger(i), name=f"{name} input {i + 1}", parallelism=s.parallelism)
                  for i, s in enumerate((first, second))]
        keyed = tagged[0].union(tagged[1]).key_by(TaggedKey(*self.keys, operator=name))
        windowed = WindowedStream(keyed, self.assigner).trigger(self._trigger).allowed_lateness(self._lateness)
        return windowed.apply(CoGroupWindow(co_group), name=name, parallelism=parallelism)


def _selector(key_selector: Any, where: str) -> Any:
    if callable(key_selector) or callable(getattr(key_selector, "get_key", None)):
        return key_selector
    raise ConfigError(f"needs a key selector (a function of a record, or a KeySelector), got {shown(key_selector)}",
                      key=where)


def _missing(what: str, steps: str, called: str) -> ConfigError:
    return ConfigError(f"{what}: {called}() comes after {steps}, as in PyFlink: "
                       f"a.{what}(b).where(key_a).equal_to(key_b).window(assigner).apply(function)",
                       key=f"{what}(...).{called}()")


__all__ = ["CoGroupedStreams", "Environment", "EqualTo", "JoinedStreams", "Where", "WithWindow"]
