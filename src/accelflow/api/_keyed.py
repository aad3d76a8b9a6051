"""``KeyedStream`` (after ``key_by``): rolling aggregations, windows, keyed process functions
and the interval join; ``WindowedStream`` (after ``window``).

Example:
    >>> from accelflow.dataflow.eventtime import CountTumblingWindowAssigner
    >>> env = Environment()
    >>> pairs = env.from_elements(("a", 1), ("a", 2), ("b", 5), ("a", 3))
    >>> sorted(pairs.key_by(lambda p: p[0]).count_window(2).reduce(lambda x, y: (x[0], x[1] + y[1]))
    ...        .execute_and_collect())
    [('a', 3)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow import KeyedProcessSpec, ReduceSpec, WindowSpec
from accelflow.dataflow.eventtime import (
    CountSlidingWindowAssigner, CountTumblingWindowAssigner, OutputTag, WindowAssigner,
)
from accelflow.api._environment import Environment
from accelflow.api._names import shown
from accelflow.api._stream import DataStream
from accelflow.scheduling import Amount


class KeyedStream(DataStream):
    """A stream partitioned by key. ``reduce``, ``sum``, ``min``, ``max``, ``min_by`` and
    ``max_by`` keep one value per key; ``window`` groups a key's records in windows;
    ``process`` runs a ``KeyedProcessFunction`` with keyed state and timers; ``map``,
    ``flat_map`` and ``filter`` give their rich functions keyed state.

    By default (``execution.runtime-mode: streaming``, Flink's default) the rolling
    aggregations emit the running value for every record, also of a bounded input; with
    ``batch`` (or ``automatic`` and only bounded sources) one final value per key at the end.
    """

    def reduce(self, fn: Any, output_type: Any = None, *, name: str | None = None, parallelism: int | None = None,
               resources: Mapping[str, Amount] | None = None) -> DataStream:
        return self._then(ReduceSpec(fn), name, parallelism, resources)

    def sum(self, field: int | str | None = None, *, name: str | None = None,
            parallelism: int | None = None) -> DataStream:
        """Sum records (numbers), or field ``field`` of tuple records keeping the others
        from the first record of the key."""
        return self._then(ReduceSpec(Aggregate(_field(field, "sum", name), "sum")), name or "sum", parallelism)

    def min(self, position_to_min: int | str = 0, *, name: str | None = None) -> DataStream:
        """The smallest value of field ``position_to_min`` so far, the other fields of the key's
        first record (Flink's ``min``; a number is its own field 0)."""
        return self._aggregate(position_to_min, "min", name)

    def max(self, position_to_max: int | str = 0, *, name: str | None = None) -> DataStream:
        """The largest value of the field so far, the other fields of the key's first record."""
        return self._aggregate(position_to_max, "max", name)

    def min_by(self, position_to_min_by: int | str = 0, *, name: str | None = None) -> DataStream:
        """The whole record with the smallest value of the field so far (the first of equals)."""
        return self._aggregate(position_to_min_by, "min_by", name)

    def max_by(self, position_to_max_by: int | str = 0, *, name: str | None = None) -> DataStream:
        """The whole record with the largest value of the field so far (the first of equals)."""
        return self._aggregate(position_to_max_by, "max_by", name)

    def _aggregate(self, field: int | str, how: str, name: str | None) -> DataStream:
        return self._then(ReduceSpec(Aggregate(_field(field, how, name), how)), name or how, None)

    def process(self, fn: Any, output_type: Any = None, *, name: str | None = None,
                parallelism: int | None = None) -> DataStream:
        """A ``KeyedProcessFunction``: ``ctx.timer_service()`` registers event-time and
        processing-time timers of the current key (``on_timer`` is called when they fire),
        ``ctx.get_current_key()``, and keyed state from the runtime context in ``open``."""
        return self._then(KeyedProcessSpec(fn), name, parallelism)._declare(output_type)

    def window(self, window_assigner: WindowAssigner) -> WindowedStream:
        """The key's records in the windows of ``window_assigner`` (e.g.
        ``TumblingEventTimeWindows.of(timedelta(minutes=1))``), then ``reduce``,
        ``aggregate``, ``process`` or ``apply``."""
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> WindowedStream:
        """Windows of ``size`` records of the key (sliding by ``slide`` records when given)."""
        return self.window(count_assigner(size, slide))

    def interval_join(self, other: Any) -> Any:
        """Pairs of this stream's records and ``other``'s (keyed alike) whose timestamps are
        close: ``.between(lower, upper).process(ProcessJoinFunction)``."""
        from accelflow.api._connected import IntervalJoin

        self._same_job(other, "interval_join")
        if not isinstance(other, KeyedStream):
            raise ConfigError("interval_join joins two keyed streams: pass other.key_by(key), not the stream itself",
                              key=f"interval_join of operator {self._operator.name!r}")
        return IntervalJoin(self, other)


def count_assigner(size: int, slide: int = 0) -> WindowAssigner:
    """The assigner of ``count_window(size, slide)``."""
    return CountSlidingWindowAssigner.of(size, slide) if slide else CountTumblingWindowAssigner.of(size)


class WindowedStream:
    """A keyed stream in windows: set ``trigger``, ``allowed_lateness`` and
    ``side_output_late_data``, then ``reduce``, ``aggregate``, ``process`` or ``apply``.
    Results carry their window's ``max_timestamp()`` as event time. Without
    ``allowed_lateness``, a record whose windows have all fired (the watermark passed their
    end) is late: dropped, or sent to ``side_output_late_data(tag)``."""

    def __init__(self, stream: KeyedStream, assigner: Any, *, all_window: bool = False) -> None:
        self._stream = stream
        self._assigner = assigner
        self._all_window = all_window
        self._trigger: Any = None
        self._lateness: Any = 0
        self._late_tag: OutputTag | None = None

    def trigger(self, trigger: Any) -> WindowedStream:
        """When a window fires (default: the assigner's, e.g. at the watermark for event time)."""
        self._trigger = trigger
        return self

    def allowed_lateness(self, time_ms: Any) -> WindowedStream:
        """Keep each window this long after its end (ms, or a ``timedelta``): late records
        within it fire the window again."""
        self._lateness = time_ms
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> WindowedStream:
        """Send records too late for any window to ``output_tag`` (read it with
        ``get_side_output(output_tag)`` of the result)."""
        self._late_tag = output_tag
        return self

    def evictor(self, evictor: Any) -> WindowedStream:
        raise ConfigError("evictors are not supported yet: use a ProcessWindowFunction that drops elements",
                          key="window(...).evictor()")

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None, *,
               name: str | None = None, parallelism: int | None = None) -> DataStream:
        """Reduce each window incrementally (``reduce_function(a, b)``); ``window_function``
        (a ``ProcessWindowFunction``/``WindowFunction``) then gets the one result."""
        stream = self._add(name, parallelism, reduce_function=reduce_function, window_function=window_function)
        same_type = self._stream._env._types.get(self._stream._id)  # a reduce keeps its input's type
        return stream._declare(output_type if window_function is not None else same_type)

    def aggregate(self, aggregate_function: Any, window_function: Any = None, accumulator_type: Any = None,
                  output_type: Any = None, *, name: str | None = None, parallelism: int | None = None) -> DataStream:
        """Aggregate each window incrementally with an ``AggregateFunction``; ``window_function``
        then gets its result."""
        return self._add(name, parallelism, aggregate_function=aggregate_function,
                         window_function=window_function)._declare(output_type)

    def process(self, process_window_function: Any, output_type: Any = None, *, name: str | None = None,
                parallelism: int | None = None) -> DataStream:
        """A ``ProcessWindowFunction``: ``process(key, context, elements)`` with every element
        of the window (``context.window()``, ``window_state()``, ``global_state()``)."""
        return self._add(name, parallelism, window_function=process_window_function)._declare(output_type)

    def apply(self, window_function: Any, output_type: Any = None, *, name: str | None = None,
              parallelism: int | None = None) -> DataStream:
        """A ``WindowFunction``: ``apply(key, window, inputs)``."""
        return self._add(name, parallelism, window_function=window_function)._declare(output_type)

    def _add(self, name: str | None, parallelism: int | None, **functions: Any) -> DataStream:
        spec = WindowSpec(self._assigner, self._trigger, self._lateness, self._late_tag, all_window=self._all_window,
                          **functions)
        if self._all_window:
            if parallelism not in (None, 1):
                raise ConfigError(f"window_all runs in one subtask, got parallelism={parallelism}",
                                  key=f"operator {name or 'window_all'!r}")
            parallelism = 1
        return self._stream._then(spec, name or ("window_all" if self._all_window else "window"), parallelism)


class Aggregate:
    """The reduce function of ``sum``, ``min``, ``max``, ``min_by`` and ``max_by`` on field
    ``field`` (None: the record itself), as Flink's ``ComparableAggregator``/``SumAggregator``.

    Example:
        >>> Aggregate(1, "min")(("a", 5, "first"), ("b", 3, "second")), Aggregate(1, "min_by")(("a", 5), ("b", 3))
        (('a', 3, 'first'), ('b', 3))
    """

    def __init__(self, field: int | str | None, how: str) -> None:
        self.field = field
        self.how = how

    def __call__(self, a: Any, b: Any) -> Any:
        x, y = _get(a, self.field), _get(b, self.field)
        how = self.how
        if how == "sum":
            return _replaced(a, self.field, x + y)
        if how in ("min", "max"):
            keep = (y < x) if how == "min" else (y > x)
            return _replaced(a, self.field, y) if keep else a
        if how == "min_by":
            return b if y < x else a
        return b if y > x else a


def _field(field: Any, how: str, name: str | None) -> int | str | None:
    if field is None or isinstance(field, str) or (isinstance(field, int) and not isinstance(field, bool) and field >= 0):
        return field
    raise ConfigError(f"{how}() needs a field: its index in the record (an integer >= 0) or its name, got "
                      f"{shown(field)}", key=f"operator {name or how!r}")


def _get(record: Any, field: int | str | None) -> Any:
    if field is None or (field == 0 and not isinstance(record, tuple | list | dict)):
        return record  # a number is its own field 0, as in Flink
    if isinstance(field, str) and not isinstance(record, dict):
        return getattr(record, field)
    return record[field]


def _replaced(record: Any, field: int | str | None, value: Any) -> Any:
    if field is None or (field == 0 and not isinstance(record, tuple | list | dict)):
        return value
    if isinstance(record, dict):
        return {**record, field: value}
    if isinstance(field, str):
        return record._replace(**{field: value})  # a namedtuple
    items = list(record)
    items[field] = value
    if isinstance(record, list):
        return items
    return type(record)(*items) if hasattr(record, "_fields") else tuple(items)


__all__ = ["Aggregate", "Environment", "KeyedStream", "WindowedStream", "count_assigner"]
