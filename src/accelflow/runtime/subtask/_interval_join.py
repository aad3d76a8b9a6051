"""The interval join (Flink's ``IntervalJoinOperator``): ``a.key_by(k).interval_join(b.key_by(k))
.between(lower, upper)`` pairs each left element at ``t`` with the right elements of the same
key at ``t + lower <= t' <= t + upper`` (either bound exclusive on request). Both sides are
buffered in keyed state by timestamp; a buffer entry is dropped by an event-time timer once
the watermark means no partner can come any more, and an element older than the watermark is
late (dropped, or sent to a late-data side output).

A pair's timestamp is the later of the two, as in Flink.

Example:
    >>> engine = IntervalJoinEngine(lambda left, right, ctx: [(left, right)], "join", -2, 2)
    >>> _ = engine.process_element1("L", 10, key="k")
    >>> engine.process_element2("R", 11, key="k").records
    [(('L', 'R'), 11)]
"""

from __future__ import annotations

from typing import Any

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow.eventtime import MIN_TIMESTAMP, MapStateDescriptor, OutputTag, to_millis
from accelflow.runtime.subtask._calls import function_object
from accelflow.runtime.subtask._engine_base import KeyedEngine, Outputs
from accelflow.runtime.subtask._timers import InternalTimer

LEFT_BUFFER = MapStateDescriptor("LEFT_BUFFER")
RIGHT_BUFFER = MapStateDescriptor("RIGHT_BUFFER")
#: the timers' namespaces (Flink's ``CLEANUP_NAMESPACE_LEFT/RIGHT``)
CLEANUP_LEFT, CLEANUP_RIGHT = "CLEANUP_LEFT", "CLEANUP_RIGHT"


class JoinContext:
    """``ProcessJoinFunction``'s ``ctx``: the pair's timestamps and side outputs."""

    def __init__(self) -> None:
        self.left = self.right = 0
        self.outputs: Outputs | None = None

    def get_left_timestamp(self) -> int:
        return self.left

    def get_right_timestamp(self) -> int:
        return self.right

    def get_timestamp(self) -> int:
        return max(self.left, self.right)

    def output(self, output_tag: Any, value: Any) -> None:
        assert self.outputs is not None
        self.outputs.emit_side(output_tag, value, self.get_timestamp())


class IntervalJoinEngine(KeyedEngine):
    """Args:
        function: a ``ProcessJoinFunction`` (or ``fn(left, right, ctx)``).
        name: the operator's name.
        lower_bound, upper_bound: the interval relative to a left element's time (a duration:
            ``timedelta``, ``Time``, ``Duration`` or ms); ``lower <= upper``.
        lower_bound_inclusive, upper_bound_inclusive: whether the bounds belong to it.
        left_late_data_output_tag, right_late_data_output_tag: where late elements go.
    """

    def __init__(self, function: Any, name: str, lower_bound: Any, upper_bound: Any, *,
                 lower_bound_inclusive: bool = True, upper_bound_inclusive: bool = True,
                 left_late_data_output_tag: OutputTag | None = None,
                 right_late_data_output_tag: OutputTag | None = None, **engine: Any) -> None:
        super().__init__(name, keyed=True, **engine)
        lower = to_millis(lower_bound, what=f"between(lower_bound) of operator {name!r}")
        upper = to_millis(upper_bound, what=f"between(upper_bound) of operator {name!r}")
        self.lower = lower if lower_bound_inclusive else lower + 1
        self.upper = upper if upper_bound_inclusive else upper - 1
        if self.lower > self.upper:
            raise ConfigError(f"lowerBound <= upperBound must be fulfilled, got [{self.lower}, {self.upper}] ms "
                              "after making exclusive bounds inclusive", key=f"between(...) of operator {name!r}")
        self.function: Any = function_object(function, "process_element")
        self.call: Any = getattr(self.function, "process_element", self.function)
        self.late_tags = (left_late_data_output_tag, right_late_data_output_tag)
        assert self.backend is not None
        self.buffers = (self.backend.get_state(LEFT_BUFFER), self.backend.get_state(RIGHT_BUFFER))
        self.join_ctx = JoinContext()

    def open(self) -> None:
        if callable(getattr(self.function, "open", None)):
            self.function.open(self.context)

    def close(self) -> None:
        if callable(getattr(self.function, "close", None)):
            self.function.close()

    def process_element1(self, value: Any, timestamp: int | None, key: Any = None) -> Outputs:
        """A left element."""
        return self._process(value, timestamp, key, left=True)

    def process_element2(self, value: Any, timestamp: int | None, key: Any = None) -> Outputs:
        """A right element."""
        return self._process(value, timestamp, key, left=False)

    def process_element(self, value: Any, timestamp: int | None, key: Any = None, input_index: int = 0) -> Outputs:
        return self._process(value, timestamp, key, left=input_index == 0)

    def _process(self, value: Any, timestamp: int | None, key: Any, left: bool) -> Outputs:
        out = Outputs()
        if timestamp is None or timestamp <= MIN_TIMESTAMP:
            raise JobError(f"operator {self.name!r}: an element has no timestamp: the elements of an interval "
                           "join need timestamps (assign_timestamps_and_watermarks(...) on both inputs)")
        self.set_current_key(key)
        watermark = self.timers.current_watermark()
        if watermark != MIN_TIMESTAMP and timestamp < watermark:
            tag = self.late_tags[0 if left else 1]
            if tag is not None:
                out.emit_side(tag, value, timestamp)
            return out
        ours, theirs = self.buffers if left else self.buffers[::-1]
        low, high = (self.lower, self.upper) if left else (-self.upper, -self.lower)
        bucket = ours.get(timestamp)
        ours.put(timestamp, (bucket or []) + [value])
        for other_time, others in sorted(theirs.items(), key=lambda item: item[0]):
            if timestamp + low <= other_time <= timestamp + high:
                for other in others:
                    if left:
                        self._collect(value, other, timestamp, other_time, out)
                    else:
                        self._collect(other, value, other_time, timestamp, out)
        cleanup = timestamp + high if high > 0 else timestamp
        self.timers.register_event_time_timer(self.current_key, CLEANUP_LEFT if left else CLEANUP_RIGHT, cleanup)
        return out

    def _collect(self, left: Any, right: Any, left_time: int, right_time: int, out: Outputs) -> None:
        ctx = self.join_ctx
        ctx.left, ctx.right, ctx.outputs = left_time, right_time, out
        out.collect(self.call(left, right, ctx), max(left_time, right_time))

    def on_event_time(self, timer: InternalTimer, out: Outputs) -> None:
        if timer.namespace == CLEANUP_LEFT:
            self.buffers[0].remove(timer.timestamp if self.upper <= 0 else timer.timestamp - self.upper)
        else:
            self.buffers[1].remove(timer.timestamp + self.lower if self.lower <= 0 else timer.timestamp)


__all__ = ["IntervalJoinEngine", "JoinContext"]
