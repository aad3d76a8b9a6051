"""Operator specs of streaming: union, timestamps and watermarks, windows, process functions,
two-input operators and async I/O (see :mod:`._specs` for what a spec is).

Example:
    >>> from accelflow.dataflow.eventtime import TumblingEventTimeWindows, Time
    >>> spec = WindowSpec(TumblingEventTimeWindows.of(Time.seconds(5)), reduce_function=max)
    >>> spec.kind, spec.keyed
    ('window', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from accelflow._errors import ConfigError
from accelflow.dataflow._async import AsyncFunction
from accelflow.dataflow._process import CoFlatMapFunction, CoMapFunction, OutputTag
from accelflow.dataflow._specs import FunctionSpec, OperatorSpec
from accelflow.dataflow._time import at_least, to_millis
from accelflow.dataflow._watermark_strategy import WatermarkStrategy
from accelflow.dataflow._windows import MergingWindowAssigner, WindowAssigner


@dataclass(frozen=True, slots=True)
class UnionSpec(OperatorSpec):
    """``union(*streams)``: the records of every input, as they come."""

    kind: ClassVar[str] = "union"
    inputs: ClassVar[int] = 2
    one_to_one: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class TimestampsSpec(OperatorSpec):
    """``assign_timestamps_and_watermarks(strategy)``: each record's event time from the
    strategy's assigner, and periodic watermarks."""

    kind: ClassVar[str] = "timestamps_watermarks"
    one_to_one: ClassVar[bool] = True
    keeps_order: ClassVar[bool] = True
    strategy: WatermarkStrategy

    def check(self, where: str) -> None:
        if not isinstance(self.strategy, WatermarkStrategy):
            raise ConfigError(f"assign_timestamps_and_watermarks needs a WatermarkStrategy (e.g. "
                              "WatermarkStrategy.for_monotonous_timestamps()), got "
                              f"{type(self.strategy).__name__}", key=where)


@dataclass(frozen=True, slots=True)
class WindowSpec(OperatorSpec):
    """``key_by(...).window(assigner)...reduce/aggregate/process/apply`` (``window_all``:
    ``all_window``, functions get no key)."""

    kind: ClassVar[str] = "window"
    keyed: ClassVar[bool] = True
    assigner: Any
    trigger: Any = None
    allowed_lateness: Any = 0
    late_tag: OutputTag | None = None
    reduce_function: Any = None
    aggregate_function: Any = None
    window_function: Any = None
    all_window: bool = False

    def check(self, where: str) -> None:
        if not isinstance(self.assigner, WindowAssigner):
            raise ConfigError(f"window(...) needs a WindowAssigner (e.g. TumblingEventTimeWindows.of("
                              f"timedelta(minutes=1))), got {type(self.assigner).__name__}", key=where)
        what = f"allowed_lateness of {where}"
        at_least(to_millis(self.allowed_lateness, what=what), 0, what=what, shown=self.allowed_lateness)
        trigger = self.trigger
        if trigger is not None and isinstance(self.assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise ConfigError(f"A merging window assigner cannot be used with a trigger that does not support "
                              f"merging ({type(trigger).__name__})", key=where)
        if self.late_tag is not None and not isinstance(self.late_tag, OutputTag):
            raise ConfigError(f"side_output_late_data needs an OutputTag, got {type(self.late_tag).__name__}",
                              key=where)


@dataclass(frozen=True, slots=True)
class ProcessSpec(FunctionSpec):
    """``process(ProcessFunction)`` on a stream that is not keyed (no state, no timers)."""

    kind: ClassVar[str] = "process"
    method: ClassVar[str | None] = "process_element"

    def check(self, where: str) -> None:
        if not callable(getattr(self.fn, "process_element", None)):
            raise ConfigError(f"process(...) needs a {'Keyed' if self.keyed else ''}ProcessFunction (an object "
                              f"with process_element(value, ctx)), got {type(self.fn).__name__}", key=where)


@dataclass(frozen=True, slots=True)
class KeyedProcessSpec(ProcessSpec):
    """``key_by(...).process(KeyedProcessFunction)``: keyed state and timers."""

    keyed: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class CoProcessSpec(FunctionSpec):
    """``connect(other).map/flat_map/process``: a ``CoMapFunction``, ``CoFlatMapFunction`` or
    ``CoProcessFunction`` over two inputs."""

    kind: ClassVar[str] = "co_process"
    inputs: ClassVar[int] = 2

    def check(self, where: str) -> None:
        fn = self.fn
        if isinstance(fn, type):
            ok = issubclass(fn, CoMapFunction | CoFlatMapFunction) or (
                hasattr(fn, "process_element1") and hasattr(fn, "process_element2"))
        else:
            ok = isinstance(fn, CoMapFunction | CoFlatMapFunction) or (
                callable(getattr(fn, "process_element1", None)) and callable(getattr(fn, "process_element2", None)))
        if not ok:
            raise ConfigError(f"connect(...) needs a CoMapFunction, CoFlatMapFunction or (Keyed)CoProcessFunction, "
                              f"got {type(fn).__name__}", key=where)


@dataclass(frozen=True, slots=True)
class KeyedCoProcessSpec(CoProcessSpec):
    """``connect(other).key_by(k1, k2).process(KeyedCoProcessFunction)``: state and timers of
    a key shared by both inputs."""

    keyed: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class IntervalJoinSpec(FunctionSpec):
    """``a.key_by(k).interval_join(b.key_by(k)).between(lower, upper).process(fn)``."""

    kind: ClassVar[str] = "interval_join"
    inputs: ClassVar[int] = 2
    keyed: ClassVar[bool] = True
    method: ClassVar[str | None] = "process_element"
    lower: Any = 0
    upper: Any = 0
    lower_inclusive: bool = True
    upper_inclusive: bool = True
    left_late_tag: OutputTag | None = None
    right_late_tag: OutputTag | None = None

    def check(self, where: str) -> None:
        FunctionSpec.check(self, where)
        lower = to_millis(self.lower, what=f"between(lower_bound) of {where}")
        upper = to_millis(self.upper, what=f"between(upper_bound) of {where}")
        lower += 0 if self.lower_inclusive else 1
        upper -= 0 if self.upper_inclusive else 1
        if lower > upper:
            raise ConfigError(f"between(lower_bound, upper_bound) needs lower_bound <= upper_bound, got "
                              f"[{lower}, {upper}] ms (exclusive bounds made inclusive)", key=where)


@dataclass(frozen=True, slots=True)
class AsyncSpec(FunctionSpec):
    """``AsyncDataStream.ordered_wait/unordered_wait(stream, fn, timeout, capacity)``."""

    kind: ClassVar[str] = "async_wait"
    method: ClassVar[str | None] = "async_invoke"
    timeout: Any = 0
    capacity: int = 100
    ordered: bool = True

    def check(self, where: str) -> None:
        if not (isinstance(self.fn, AsyncFunction) or (isinstance(self.fn, type) and issubclass(self.fn, AsyncFunction))
                or callable(self.fn)):
            raise ConfigError(f"async I/O needs an AsyncFunction (async def async_invoke(value)) or a function "
                              f"returning an awaitable, got {type(self.fn).__name__}", key=where)
        what = f"timeout of {where}"
        at_least(to_millis(self.timeout, what=what), 1, what=what, shown=self.timeout)
        capacity = self.capacity
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"capacity must be a positive integer (inputs in flight), got {capacity!r}", key=where)
