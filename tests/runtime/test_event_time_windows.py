"""PyFlink's own window tests (flink-python/pyflink/datastream/tests/test_window.py) as real
jobs on the local cluster, at parallelism 1 and 2, with PyFlink's expected results (the same
scenarios run on the bare engine in tests/eventtime/test_pyflink_windows.py): timestamps and
watermarks travel with the records between subtasks, keys go to the subtask owning their key
group, and the end of the bounded input fires what is left."""

from __future__ import annotations

from typing import Any

import pytest
from event_jobs import (
    MONOTONOUS, CountAllWindowProcessFunction, CountWindowProcessFunction, GapFromSecondColumn, ReduceResult,
    SumAggregate, SumWindowFunction, add_second,
)

from accelflow import (
    CountSlidingWindowAssigner, CountTrigger, Environment, EventTimeSessionWindows, EventTimeTrigger,
    GlobalWindows, ProcessWindowFunction, PurgingTrigger, SlidingEventTimeWindows, Time, TumblingEventTimeWindows,
    Types, WatermarkStrategy,
)

DATA = [("a", 1), ("a", 2), ("b", 3), ("a", 6), ("b", 8), ("b", 9), ("a", 15)]
HI = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 5), ("hi", 8), ("hi", 9), ("hi", 15)]
GAP2 = EventTimeSessionWindows.with_gap(Time.milliseconds(2))
PARALLELISM = pytest.mark.parametrize("p", [1, 2])


def keyed(p: int, data: list[Any], key: Any = lambda x: x[0], strategy: Any = MONOTONOUS) -> Any:
    """``data`` (in one source subtask, in order) with timestamps, keyed, at parallelism ``p``."""
    env = Environment({"parallelism.default": p})
    stream = env.from_collection(data)
    if strategy is not None:
        stream = stream.assign_timestamps_and_watermarks(strategy)
    return stream.key_by(key)


def collected(stream: Any) -> list[Any]:
    return sorted(stream.execute_and_collect(), key=repr)


def _sorted(values: list[Any]) -> list[Any]:
    return sorted(values, key=repr)


@PARALLELISM
def test_event_time_tumbling_window(p: int) -> None:
    """test_window.py::WindowTests::test_event_time_tumbling_window."""
    stream = keyed(p, HI).window(TumblingEventTimeWindows.of(Time.milliseconds(5))) \
        .process(CountWindowProcessFunction(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG(), Types.INT()]))
    assert collected(stream) == _sorted([("hi", 0, 5, 4), ("hi", 5, 10, 3), ("hi", 15, 20, 1)])


@PARALLELISM
def test_count_tumbling_window(p: int) -> None:
    """test_window.py::WindowTests::test_count_tumbling_window (``count_window(3)``)."""
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
    stream = keyed(p, data, key=lambda x: x[1], strategy=None).count_window(3).apply(SumWindowFunction())
    assert collected(stream) == _sorted([("hi", 9), ("hello", 12)])


@PARALLELISM
def test_event_time_sliding_window(p: int) -> None:
    """test_window.py::WindowTests::test_event_time_sliding_window."""
    stream = keyed(p, HI).window(SlidingEventTimeWindows.of(Time.milliseconds(5), Time.milliseconds(2))) \
        .process(CountWindowProcessFunction())
    assert collected(stream) == _sorted([
        ("hi", -2, 3, 2), ("hi", 0, 5, 4), ("hi", 2, 7, 4), ("hi", 4, 9, 3), ("hi", 6, 11, 2), ("hi", 8, 13, 2),
        ("hi", 12, 17, 1), ("hi", 14, 19, 1)])


@PARALLELISM
def test_count_sliding_window(p: int) -> None:
    """test_window.py::WindowTests::test_count_sliding_window."""
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]
    stream = keyed(p, data, key=lambda x: x[1], strategy=None).window(CountSlidingWindowAssigner.of(2, 1)) \
        .apply(SumWindowFunction())
    assert collected(stream) == _sorted([("hello", 6), ("hi", 8), ("hi", 4), ("hello", 10)])


@PARALLELISM
def test_event_time_session_window(p: int) -> None:
    """test_window.py::WindowTests::test_event_time_session_window."""
    data = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)]
    stream = keyed(p, data).window(EventTimeSessionWindows.with_gap(Time.milliseconds(5))) \
        .process(CountWindowProcessFunction())
    assert collected(stream) == _sorted([("hi", 1, 14, 6), ("hi", 15, 20, 1)])


@PARALLELISM
def test_event_time_dynamic_gap_session_window(p: int) -> None:
    """test_window.py::WindowTests::test_event_time_dynamic_gap_session_window."""
    data = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 9), ("hi", 9), ("hi", 15)]
    stream = keyed(p, data).window(EventTimeSessionWindows.with_dynamic_gap(GapFromSecondColumn())) \
        .process(CountWindowProcessFunction())
    assert collected(stream) == _sorted([("hi", 1, 8, 4), ("hi", 9, 30, 3)])


@PARALLELISM
def test_window_reduce_passthrough(p: int) -> None:
    """test_window.py::WindowTests::test_window_reduce_passthrough."""
    stream = keyed(p, DATA).window(GAP2).reduce(add_second)
    assert collected(stream) == _sorted([("a", 3), ("a", 6), ("a", 15), ("b", 3), ("b", 17)])


@PARALLELISM
def test_window_reduce_process(p: int) -> None:
    """test_window.py::WindowTests::test_window_reduce_process."""
    stream = keyed(p, DATA).window(GAP2).reduce(add_second, window_function=ReduceResult(), output_type=Types.STRING())
    assert collected(stream) == _sorted([
        "current window start at 1, reduce result ('a', 3)", "current window start at 15, reduce result ('a', 15)",
        "current window start at 3, reduce result ('b', 3)", "current window start at 6, reduce result ('a', 6)",
        "current window start at 8, reduce result ('b', 17)"])


@PARALLELISM
def test_window_aggregate_accumulator_type(p: int) -> None:
    """test_window.py::WindowTests::test_window_aggregate_accumulator_type."""
    stream = keyed(p, DATA).window(GAP2).aggregate(SumAggregate(), accumulator_type=Types.TUPLE([Types.INT(), Types.STRING()]))
    assert collected(stream) == _sorted([("a", 15), ("a", 3), ("a", 6), ("b", 17), ("b", 3)])


@PARALLELISM
def test_session_window_late_merge(p: int) -> None:
    """test_window.py::WindowTests::test_session_window_late_merge."""
    stream = keyed(p, [("hi", 0), ("hi", 8), ("hi", 4)]) \
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(5))).process(CountWindowProcessFunction())
    assert collected(stream) == [("hi", 0, 13, 3)]


@PARALLELISM
def test_event_time_session_window_with_purging_trigger(p: int) -> None:
    """test_window.py::WindowTests::test_event_time_session_window_with_purging_trigger."""
    data = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)]
    stream = keyed(p, data).window(EventTimeSessionWindows.with_gap(Time.milliseconds(3))) \
        .trigger(PurgingTrigger.of(EventTimeTrigger.create())).process(CountWindowProcessFunction())
    assert collected(stream) == _sorted([("hi", 1, 7, 4), ("hi", 8, 12, 2), ("hi", 15, 18, 1)])


class _CountElements(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        return [(key, len(list(elements)))]


@PARALLELISM
def test_global_window_with_purging_trigger(p: int) -> None:
    """test_window.py::WindowTests::test_global_window_with_purging_trigger."""
    stream = keyed(p, [("hi", 1)] * 7).window(GlobalWindows.create()) \
        .trigger(PurgingTrigger.of(CountTrigger.of(2))).process(_CountElements())
    assert collected(stream) == [("hi", 2)] * 3


@PARALLELISM
def test_event_time_tumbling_window_all(p: int) -> None:
    """test_window.py::WindowTests::test_event_time_tumbling_window_all (one window subtask)."""
    data = [("hi", 1), ("hello", 2), ("hi", 3), ("hello", 4), ("hello", 5), ("hi", 8), ("hi", 9), ("hi", 15)]
    env = Environment({"parallelism.default": p})
    stream = env.from_collection(data).assign_timestamps_and_watermarks(MONOTONOUS) \
        .window_all(TumblingEventTimeWindows.of(Time.milliseconds(5))).process(CountAllWindowProcessFunction())
    assert collected(stream) == _sorted([(0, 5, 4), (15, 20, 1), (5, 10, 3)])


@PARALLELISM
def test_window_all_reduce(p: int) -> None:
    """test_window.py::WindowTests::test_window_all_reduce."""
    env = Environment({"parallelism.default": p})
    stream = env.from_collection(DATA).assign_timestamps_and_watermarks(MONOTONOUS).window_all(GAP2) \
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    assert collected(stream) == _sorted([("a", 15), ("a", 6), ("a", 23)])


@PARALLELISM
def test_chained_window(p: int) -> None:
    """test_window.py::EmbeddedWindowTests::test_chained_window (a reduce per minute, then a map)."""
    data = [(1676461680000, "a1", "b1", 1), (1676461680000, "a1", "b1", 1), (1676461680000, "a2", "b2", 1),
            (1676461680000, "a1", "b2", 1), (1676461740000, "a1", "b1", 1), (1676461740000, "a2", "b2", 1)]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v[0])
    stream = keyed(p, data, key=lambda x: (x[0], x[1], x[2]), strategy=strategy) \
        .window(TumblingEventTimeWindows.of(Time.minutes(1))) \
        .reduce(lambda x, y: (x[0], x[1], x[2], x[3] + y[3])).map(lambda x: (x[0], x[1], x[3]))
    assert collected(stream) == _sorted([
        (1676461680000, "a1", 1), (1676461680000, "a1", 2), (1676461680000, "a2", 1), (1676461740000, "a1", 1),
        (1676461740000, "a2", 1)])

