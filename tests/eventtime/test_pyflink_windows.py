"""PyFlink's own window tests (flink-python/pyflink/datastream/tests/test_window.py) ported to
the engines: the bounded collection goes through the watermark generator and the window
engine, then the end-of-input watermark (Long.MAX_VALUE) fires what is left, as a bounded
PyFlink job does. The expected results are PyFlink's (its ``(hi,0,5,4)`` rows as tuples)."""

from __future__ import annotations

from typing import Any

from accelflow.dataflow.eventtime import (
    MAX_TIMESTAMP, AggregateFunction, CountSlidingWindowAssigner, CountTrigger, CountTumblingWindowAssigner,
    EventTimeSessionWindows, EventTimeTrigger, GlobalWindows, OutputTag, ProcessAllWindowFunction,
    ProcessWindowFunction, PurgingTrigger, SessionWindowTimeGapExtractor, SlidingEventTimeWindows, Time,
    TimestampAssigner, TumblingEventTimeWindows, WatermarkStrategy, WindowFunction)
from accelflow.runtime.subtask._watermarks import TimestampsAndWatermarks, Watermark
from accelflow.runtime.subtask._window_engine import WindowEngine

DATA = [("a", 1), ("a", 2), ("b", 3), ("a", 6), ("b", 8), ("b", 9), ("a", 15)]
HI = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 5), ("hi", 8), ("hi", 9), ("hi", 15)]


class SecondColumnTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


MONOTONOUS = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondColumnTimestampAssigner())


def run(engine: WindowEngine, data: list[Any], key: Any = lambda x: x[0], strategy: Any = MONOTONOUS,
        per_element_watermarks: bool = False) -> tuple[list[Any], list[Any]]:
    """Runs ``data`` as a bounded PyFlink job would: returns the main and side outputs' values."""
    generator = TimestampsAndWatermarks(strategy, "assign") if strategy is not None else None
    main: list[Any] = []
    side: list[Any] = []

    def take(out: Any) -> None:
        main.extend(v for v, _ in out.records)
        side.extend(v for _, v, _ in out.side)

    engine.open()
    for value in data:
        timestamp = generator.process_element(value)[0] if generator is not None else None
        take(engine.process_element(value, timestamp, key=key(value)))
        if per_element_watermarks and generator is not None:  # PerElementWatermarkGenerator
            take(engine.advance_watermark(generator.max_timestamp))
    take(engine.advance_watermark(MAX_TIMESTAMP))
    return sorted(main, key=repr), sorted(side, key=repr)


class CountWindowProcessFunction(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        return [(key, context.window().start, context.window().end, len(list(elements)))]


class SumWindowFunction(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        return [(key, sum(i[0] for i in inputs))]


def _sorted(values: list[Any]) -> list[Any]:
    return sorted(values, key=repr)


def test_event_time_tumbling_window() -> None:
    """test_window.py::WindowTests::test_event_time_tumbling_window."""
    engine = WindowEngine("w", TumblingEventTimeWindows.of(Time.milliseconds(5)), window_function=CountWindowProcessFunction())
    assert run(engine, HI)[0] == _sorted([("hi", 0, 5, 4), ("hi", 5, 10, 3), ("hi", 15, 20, 1)])


def test_count_tumbling_window() -> None:
    """test_window.py::WindowTests::test_count_tumbling_window (``count_window(3)``)."""
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
    engine = WindowEngine("w", CountTumblingWindowAssigner(3), window_function=SumWindowFunction())
    assert run(engine, data, key=lambda x: x[1], strategy=None)[0] == _sorted([("hi", 9), ("hello", 12)])


def test_event_time_sliding_window() -> None:
    """test_window.py::WindowTests::test_event_time_sliding_window."""
    engine = WindowEngine("w", SlidingEventTimeWindows.of(Time.milliseconds(5), Time.milliseconds(2)),
                          window_function=CountWindowProcessFunction())
    assert run(engine, HI)[0] == _sorted([
        ("hi", -2, 3, 2), ("hi", 0, 5, 4), ("hi", 2, 7, 4), ("hi", 4, 9, 3), ("hi", 6, 11, 2), ("hi", 8, 13, 2),
        ("hi", 12, 17, 1), ("hi", 14, 19, 1)])


def test_count_sliding_window() -> None:
    """test_window.py::WindowTests::test_count_sliding_window (``CountSlidingWindowAssigner(2, 1)``)."""
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]
    engine = WindowEngine("w", CountSlidingWindowAssigner(2, 1), window_function=SumWindowFunction())
    assert run(engine, data, key=lambda x: x[1], strategy=None)[0] == _sorted(
        [("hello", 6), ("hi", 8), ("hi", 4), ("hello", 10)])


def test_event_time_session_window() -> None:
    """test_window.py::WindowTests::test_event_time_session_window."""
    engine = WindowEngine("w", EventTimeSessionWindows.with_gap(Time.milliseconds(5)),
                          window_function=CountWindowProcessFunction())
    data = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)]
    assert run(engine, data)[0] == _sorted([("hi", 1, 14, 6), ("hi", 15, 20, 1)])


class MySessionWindowTimeGapExtractor(SessionWindowTimeGapExtractor):
    def extract(self, element: Any) -> int:
        return int(element[1])


def test_event_time_dynamic_gap_session_window() -> None:
    """test_window.py::WindowTests::test_event_time_dynamic_gap_session_window."""
    engine = WindowEngine("w", EventTimeSessionWindows.with_dynamic_gap(MySessionWindowTimeGapExtractor()),
                          window_function=CountWindowProcessFunction())
    data = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 9), ("hi", 9), ("hi", 15)]
    assert run(engine, data)[0] == _sorted([("hi", 1, 8, 4), ("hi", 9, 30, 3)])


GAP2 = EventTimeSessionWindows.with_gap(Time.milliseconds(2))


def test_window_reduce_passthrough() -> None:
    """test_window.py::WindowTests::test_window_reduce_passthrough."""
    engine = WindowEngine("w", GAP2, reduce_function=lambda a, b: (b[0], a[1] + b[1]))
    assert run(engine, DATA)[0] == _sorted([("a", 3), ("a", 6), ("a", 15), ("b", 3), ("b", 17)])


def test_window_reduce_process() -> None:
    """test_window.py::WindowTests::test_window_reduce_process."""
    class MyProcessFunction(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            yield f"current window start at {context.window().start}, reduce result {next(iter(elements))}"

    engine = WindowEngine("w", GAP2, reduce_function=lambda a, b: (b[0], a[1] + b[1]), window_function=MyProcessFunction())
    assert run(engine, DATA)[0] == _sorted([
        "current window start at 1, reduce result ('a', 3)", "current window start at 15, reduce result ('a', 15)",
        "current window start at 3, reduce result ('b', 3)", "current window start at 6, reduce result ('a', 6)",
        "current window start at 8, reduce result ('b', 17)"])


class ParityAggregate(AggregateFunction):
    """``MyAggregateFunction`` of the aggregate passthrough tests: evens minus odds."""

    def create_accumulator(self) -> Any:
        return "", {0: 0, 1: 0}

    def add(self, value: Any, accumulator: Any) -> Any:
        accumulator[1][value[1] % 2] += 1
        return value[0], accumulator[1]

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0], accumulator[1][0] - accumulator[1][1]

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a[0], {0: acc_a[1][0] + acc_b[1][0], 1: acc_a[1][1] + acc_b[1][1]}


class SumAggregate(AggregateFunction):
    """``MyAggregateFunction`` of the accumulator-type tests: (key, sum of timestamps)."""

    def create_accumulator(self) -> Any:
        return 0, ""

    def add(self, value: Any, accumulator: Any) -> Any:
        return value[1] + accumulator[0], value[0]

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[1], accumulator[0]

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a[0] + acc_b[0], acc_a[1]


def test_window_aggregate_passthrough() -> None:
    """test_window.py::WindowTests::test_window_aggregate_passthrough."""
    engine = WindowEngine("w", GAP2, aggregate_function=ParityAggregate())
    assert run(engine, DATA)[0] == _sorted([("a", -1), ("a", 0), ("a", 1), ("b", -1), ("b", 0)])


def test_window_aggregate_accumulator_type() -> None:
    """test_window.py::WindowTests::test_window_aggregate_accumulator_type."""
    engine = WindowEngine("w", GAP2, aggregate_function=SumAggregate())
    assert run(engine, DATA)[0] == _sorted([("a", 15), ("a", 3), ("a", 6), ("b", 17), ("b", 3)])


def test_window_aggregate_process() -> None:
    """test_window.py::WindowTests::test_window_aggregate_process."""
    class MyProcessWindowFunction(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            result = next(iter(elements))
            yield f"key {result[0]} timestamp sum {result[1]}"

    engine = WindowEngine("w", GAP2, aggregate_function=SumAggregate(), window_function=MyProcessWindowFunction())
    assert run(engine, DATA)[0] == _sorted([
        "key a timestamp sum 15", "key a timestamp sum 3", "key a timestamp sum 6", "key b timestamp sum 17",
        "key b timestamp sum 3"])


def test_session_window_late_merge() -> None:
    """test_window.py::WindowTests::test_session_window_late_merge."""
    engine = WindowEngine("w", EventTimeSessionWindows.with_gap(Time.milliseconds(5)),
                          window_function=CountWindowProcessFunction())
    assert run(engine, [("hi", 0), ("hi", 8), ("hi", 4)])[0] == [("hi", 0, 13, 3)]


def test_event_time_session_window_with_purging_trigger() -> None:
    """test_window.py::WindowTests::test_event_time_session_window_with_purging_trigger."""
    engine = WindowEngine("w", EventTimeSessionWindows.with_gap(Time.milliseconds(3)),
                          trigger=PurgingTrigger.of(EventTimeTrigger.create()), window_function=CountWindowProcessFunction())
    data = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)]
    assert run(engine, data)[0] == _sorted([("hi", 1, 7, 4), ("hi", 8, 12, 2), ("hi", 15, 18, 1)])


def test_global_window_with_purging_trigger() -> None:
    """test_window.py::WindowTests::test_global_window_with_purging_trigger."""
    class MyProcessFunction(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            return [(key, len(list(elements)))]

    engine = WindowEngine("w", GlobalWindows.create(), trigger=PurgingTrigger.of(CountTrigger.of(2)),
                          window_function=MyProcessFunction())
    assert run(engine, [("hi", 1)] * 7)[0] == [("hi", 2)] * 3


class CountAllWindowProcessFunction(ProcessAllWindowFunction):
    def process(self, context: Any, elements: Any) -> Any:
        return [(context.window().start, context.window().end, len(list(elements)))]


def _all(engine: WindowEngine, data: list[Any]) -> list[Any]:
    return run(engine, data, key=lambda x: None)[0]


def test_event_time_tumbling_window_all() -> None:
    """test_window.py::WindowTests::test_event_time_tumbling_window_all."""
    data = [("hi", 1), ("hello", 2), ("hi", 3), ("hello", 4), ("hello", 5), ("hi", 8), ("hi", 9), ("hi", 15)]
    engine = WindowEngine("w", TumblingEventTimeWindows.of(Time.milliseconds(5)),
                          window_function=CountAllWindowProcessFunction(), all_window=True)
    assert _all(engine, data) == _sorted([(0, 5, 4), (15, 20, 1), (5, 10, 3)])


def test_window_all_reduce() -> None:
    """test_window.py::WindowTests::test_window_all_reduce."""
    engine = WindowEngine("w", GAP2, reduce_function=lambda a, b: (a[0], a[1] + b[1]), all_window=True)
    assert _all(engine, DATA) == _sorted([("a", 15), ("a", 6), ("a", 23)])


def test_window_all_reduce_process() -> None:
    """test_window.py::WindowTests::test_window_all_reduce_process."""
    class MyProcessFunction(ProcessAllWindowFunction):
        def process(self, context: Any, elements: Any) -> Any:
            yield f"current window start at {context.window().start}, reduce result {next(iter(elements))}"

    engine = WindowEngine("w", GAP2, reduce_function=lambda a, b: (a[0], a[1] + b[1]),
                          window_function=MyProcessFunction(), all_window=True)
    assert _all(engine, DATA) == _sorted([
        "current window start at 1, reduce result ('a', 6)", "current window start at 6, reduce result ('a', 23)",
        "current window start at 15, reduce result ('a', 15)"])


def test_window_all_aggregate() -> None:
    """test_window.py::WindowTests::test_window_all_aggregate."""
    engine = WindowEngine("w", GAP2, aggregate_function=ParityAggregate(), all_window=True)
    assert _all(engine, DATA) == _sorted([("a", -1), ("b", -1), ("b", 1)])


def test_window_all_aggregate_process() -> None:
    """test_window.py::WindowTests::test_window_all_aggregate_process."""
    class MyProcessWindowFunction(ProcessAllWindowFunction):
        def process(self, context: Any, elements: Any) -> Any:
            result = next(iter(elements))
            yield f"key {result[0]} timestamp sum {result[1]}"

    engine = WindowEngine("w", GAP2, aggregate_function=SumAggregate(), window_function=MyProcessWindowFunction(),
                          all_window=True)
    assert _all(engine, DATA) == _sorted(["key b timestamp sum 6", "key b timestamp sum 23", "key a timestamp sum 15"])


def test_side_output_late_data() -> None:
    """test_window.py::WindowTests::test_side_output_late_data (a watermark after every element,
    PyFlink's ``PerElementWatermarkGenerator``; lateness 0)."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondColumnTimestampAssigner())
    engine = WindowEngine("w", TumblingEventTimeWindows.of(Time.milliseconds(5)), allowed_lateness=0,
                          late_data_output_tag=OutputTag("late-data"), window_function=CountWindowProcessFunction())
    main, side = run(engine, [("a", 0), ("a", 8), ("a", 4), ("a", 6)], strategy=strategy, per_element_watermarks=True)
    assert (main, side) == (_sorted([("a", 0, 5, 1), ("a", 5, 10, 2)]), [("a", 4)])


def test_chained_window() -> None:
    """test_window.py::EmbeddedWindowTests::test_chained_window (a reduce per minute, then a map)."""
    data = [(1676461680000, "a1", "b1", 1), (1676461680000, "a1", "b1", 1), (1676461680000, "a2", "b2", 1),
            (1676461680000, "a1", "b2", 1), (1676461740000, "a1", "b1", 1), (1676461740000, "a2", "b2", 1)]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v[0])
    engine = WindowEngine("w", TumblingEventTimeWindows.of(Time.minutes(1)),
                          reduce_function=lambda x, y: (x[0], x[1], x[2], x[3] + y[3]))
    reduced = run(engine, data, key=lambda x: (x[0], x[1], x[2]), strategy=strategy)[0]
    assert _sorted([(x[0], x[1], x[3]) for x in reduced]) == _sorted([
        (1676461680000, "a1", 1), (1676461680000, "a1", 2), (1676461680000, "a2", 1), (1676461740000, "a1", 1),
        (1676461740000, "a2", 1)])


def test_generator_emits_max_watermark_at_end_of_input() -> None:
    """The end of a bounded input is Watermark(Long.MAX_VALUE) (Flink's ``Watermark.MAX_WATERMARK``)."""
    assert TimestampsAndWatermarks(MONOTONOUS, "assign").end_of_input() == [Watermark(MAX_TIMESTAMP)]
