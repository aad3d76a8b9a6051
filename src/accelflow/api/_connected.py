"""Two streams into one operator: ``connect`` (``ConnectedStreams``) and the interval join.

Example:
    >>> from accelflow.dataflow.eventtime import CoMapFunction
    >>> class Tag(CoMapFunction):
    ...     def map1(self, value): return ("number", value)
    ...     def map2(self, value): return ("word", value)
    >>> env = Environment()
    >>> numbers, words = env.from_elements(1, 2), env.from_elements("a")
    >>> sorted(numbers.connect(words).map(Tag()).execute_and_collect())
    [('number', 1), ('number', 2), ('word', 'a')]
"""

from __future__ import annotations

from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow import CoProcessSpec, IntervalJoinSpec, KeyedCoProcessSpec
from accelflow.dataflow.eventtime import KeyedCoProcessFunction, OutputTag
from accelflow.api._environment import Environment
from accelflow.api._names import shown
from accelflow.api._stream import DataStream
from accelflow.api._keyed import KeyedStream


class ConnectedStreams:
    """Two streams, possibly of different types, for one operator; state and timers of a key
    are shared by both inputs after :meth:`key_by`."""

    def __init__(self, first: DataStream, second: DataStream) -> None:
        self.stream1 = first
        self.stream2 = second

    @property
    def _keyed(self) -> bool:
        return isinstance(self.stream1, KeyedStream) and isinstance(self.stream2, KeyedStream)

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> ConnectedStreams:
        """Both inputs keyed (records with equal keys meet in one subtask)."""
        return ConnectedStreams(self.stream1.key_by(key_selector1), self.stream2.key_by(key_selector2))

    def map(self, func: Any, output_type: Any = None, *, name: str | None = None,
            parallelism: int | None = None) -> DataStream:
        """A ``CoMapFunction``: ``map1`` for the first input's records, ``map2`` for the second's."""
        return self._add(func, name or "co_map", parallelism)._declare(output_type)

    def flat_map(self, func: Any, output_type: Any = None, *, name: str | None = None,
                 parallelism: int | None = None) -> DataStream:
        """A ``CoFlatMapFunction``: ``flat_map1`` and ``flat_map2`` return iterables."""
        return self._add(func, name or "co_flat_map", parallelism)._declare(output_type)

    def process(self, func: Any, output_type: Any = None, *, name: str | None = None,
                parallelism: int | None = None) -> DataStream:
        """A ``CoProcessFunction`` or, after :meth:`key_by`, a ``KeyedCoProcessFunction``
        (timers and keyed state shared by both inputs)."""
        keyed_fn = isinstance(func, KeyedCoProcessFunction) or (
            isinstance(func, type) and issubclass(func, KeyedCoProcessFunction))
        if keyed_fn and not self._keyed:
            raise ConfigError("a KeyedCoProcessFunction needs both inputs keyed: "
                              "a.connect(b).key_by(key1, key2).process(...)", key=f"operator {name or 'co_process'!r}")
        return self._add(func, name or "co_process", parallelism)._declare(output_type)

    def _add(self, func: Any, name: str, parallelism: int | None) -> DataStream:
        spec = KeyedCoProcessSpec(func) if self._keyed else CoProcessSpec(func)
        env = self.stream1._env
        return env._add(spec, name, parallelism, [self.stream1._edge(0), self.stream2._edge(1)])


class IntervalJoin:
    """``left.interval_join(right)``: set the interval with :meth:`between`."""

    def __init__(self, left: KeyedStream, right: KeyedStream) -> None:
        self.left = left
        self.right = right

    def between(self, lower_bound: Any, upper_bound: Any) -> IntervalJoined:
        """Join a left record at ``t`` with the right records of its key at ``t + lower_bound
        <= t' <= t + upper_bound`` (durations: ``timedelta``, ``Time``, or ms)."""
        return IntervalJoined(self.left, self.right, lower_bound, upper_bound)


class IntervalJoined:
    """An interval join with its bounds: make them exclusive, send late records to side
    outputs, then :meth:`process` the pairs with a ``ProcessJoinFunction``
    (``process_element(left, right, ctx)``; a pair's timestamp is the later of the two)."""

    def __init__(self, left: KeyedStream, right: KeyedStream, lower: Any, upper: Any) -> None:
        self.left, self.right = left, right
        self.lower, self.upper = lower, upper
        self.lower_inclusive = self.upper_inclusive = True
        self.left_late: OutputTag | None = None
        self.right_late: OutputTag | None = None

    def lower_bound_exclusive(self) -> IntervalJoined:
        self.lower_inclusive = False
        return self

    def upper_bound_exclusive(self) -> IntervalJoined:
        self.upper_inclusive = False
        return self

    def side_output_left_late_data(self, output_tag: OutputTag) -> IntervalJoined:
        self.left_late = _tag(output_tag)
        return self

    def side_output_right_late_data(self, output_tag: OutputTag) -> IntervalJoined:
        self.right_late = _tag(output_tag)
        return self

    def process(self, process_join_function: Any, output_type: Any = None, *, name: str | None = None,
                parallelism: int | None = None) -> DataStream:
        spec = IntervalJoinSpec(process_join_function, self.lower, self.upper, self.lower_inclusive,
                                self.upper_inclusive, self.left_late, self.right_late)
        env = self.left._env
        return env._add(spec, name or "interval_join", parallelism,
                        [self.left._edge(0), self.right._edge(1)])._declare(output_type)


def _tag(tag: Any) -> OutputTag:
    if not isinstance(tag, OutputTag):
        raise ConfigError(f"a late-data side output needs an OutputTag, got {shown(tag)}", key="interval_join")
    return tag


__all__ = ["ConnectedStreams", "Environment", "IntervalJoin", "IntervalJoined"]
