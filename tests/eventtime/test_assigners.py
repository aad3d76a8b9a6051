"""Window assigners and triggers, ported from Flink's TumblingEventTimeWindowsTest,
SlidingEventTimeWindowsTest, EventTimeSessionWindowsTest, TimeWindowTest, EventTimeTriggerTest
and MergingWindowSetTest (flink-streaming-java/src/test/java/org/apache/flink/streaming/runtime/
operators/windowing/), plus the bad inputs of issue 30 (a window under 1 ms, lateness < 0)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow.eventtime import (
    MIN_TIMESTAMP, CountTrigger, EventTimeSessionWindows, EventTimeTrigger, GlobalWindows, SlidingEventTimeWindows,
    Time, TimeWindow, TumblingEventTimeWindows, TumblingProcessingTimeWindows)
from accelflow.runtime.subtask._merging_windows import MergingWindowSet
from accelflow.runtime.subtask._window_engine import WindowEngine


def tw(start: int, end: int) -> TimeWindow:
    return TimeWindow(start, end)


def test_tumbling_window_assignment() -> None:
    """TumblingEventTimeWindowsTest::testWindowAssignment and ::testWindowAssignmentWithOffset,
    ::testWindowAssignmentWithNegativeOffset."""
    assigner = TumblingEventTimeWindows.of(timedelta(milliseconds=5000))
    assert [assigner.assign_windows("s", t, None) for t in (0, 4999, 5000)] == [[tw(0, 5000)], [tw(0, 5000)], [tw(5000, 10000)]]
    offset = TumblingEventTimeWindows.of(Time.milliseconds(5000), Time.milliseconds(100))
    assert [offset.assign_windows("s", t, None) for t in (100, 5099, 5100)] == [
        [tw(100, 5100)], [tw(100, 5100)], [tw(5100, 10100)]]
    negative = TumblingEventTimeWindows.of(timedelta(seconds=5), timedelta(milliseconds=-100))
    assert [negative.assign_windows("s", t, None) for t in (0, 4899, 4900)] == [
        [tw(-100, 4900)], [tw(-100, 4900)], [tw(4900, 9900)]]


def test_sliding_window_assignment() -> None:
    """SlidingEventTimeWindowsTest::testWindowAssignment and ::testWindowAssignmentWithOffset."""
    assigner = SlidingEventTimeWindows.of(timedelta(milliseconds=5000), timedelta(milliseconds=1000))
    assert sorted(assigner.assign_windows("s", 0, None)) == [tw(-4000, 1000), tw(-3000, 2000), tw(-2000, 3000),
                                                             tw(-1000, 4000), tw(0, 5000)]
    assert sorted(assigner.assign_windows("s", 4999, None)) == [tw(0, 5000), tw(1000, 6000), tw(2000, 7000),
                                                                tw(3000, 8000), tw(4000, 9000)]
    offset = SlidingEventTimeWindows.of(Time.milliseconds(5000), Time.milliseconds(1000), Time.milliseconds(100))
    assert sorted(offset.assign_windows("s", 100, None)) == [tw(-3900, 1100), tw(-2900, 2100), tw(-1900, 3100),
                                                             tw(-900, 4100), tw(100, 5100)]


def test_session_window_assignment_and_merging() -> None:
    """EventTimeSessionWindowsTest::testWindowAssignment and ::testMergeConsecutiveWindows."""
    assigner = EventTimeSessionWindows.with_gap(timedelta(milliseconds=5000))
    assert assigner.assign_windows("s", 0, None) == [tw(0, 5000)]
    assert assigner.assign_windows("s", 4999, None) == [tw(4999, 9999)]
    merges: list[Any] = []
    assigner.merge_windows([tw(0, 1), tw(1, 2), tw(2, 3), tw(4, 5), tw(5, 6)],
                           lambda merged, result: merges.append((sorted(merged), result)))
    assert merges == [([tw(0, 1), tw(1, 2), tw(2, 3)], tw(0, 3)), ([tw(4, 5), tw(5, 6)], tw(4, 6))]


def test_window_start_with_offset() -> None:
    """TimeWindowTest::testGetWindowStartWithOffset."""
    start = TimeWindow.get_window_start_with_offset
    assert [start(t, 0, 7) for t in (1, 2, 3, 4, 5, 6, 7, 8)] == [0, 0, 0, 0, 0, 0, 7, 7]
    assert [start(t, 1, 7) for t in (1, 7, 8, 13)] == [1, 1, 8, 8]
    assert [start(t, -1, 7) for t in (1, 5, 6, 7)] == [-1, -1, 6, 6]
    assert [start(t, 8, 7) for t in (1, 2, 8)] == [1, 1, 8]


def test_time_window_intersects_and_cover() -> None:
    """TimeWindowTest::testTimeWindowIntersect and ::testCover (touching windows intersect)."""
    assert tw(0, 5).intersects(tw(5, 10)) and not tw(0, 5).intersects(tw(6, 10))
    assert tw(0, 5).cover(tw(3, 10)) == tw(0, 10) and tw(0, 5).max_timestamp() == 4


class _Ctx:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark
        self.timers: list[int] = []

    def get_current_watermark(self) -> int:
        return self.watermark

    def register_event_time_timer(self, t: int) -> None:
        self.timers.append(t)

    def delete_event_time_timer(self, t: int) -> None:
        self.timers.remove(t)


def test_event_time_trigger() -> None:
    """EventTimeTriggerTest::testWindowSeparationAndFiring and ::testLateElementTriggersImmediately."""
    trigger, ctx = EventTimeTrigger.create(), _Ctx(MIN_TIMESTAMP)
    assert trigger.on_element("x", 0, tw(0, 2), ctx).name == "CONTINUE" and ctx.timers == [1]
    assert trigger.on_event_time(0, tw(0, 2), ctx).name == "CONTINUE"
    assert trigger.on_event_time(1, tw(0, 2), ctx).name == "FIRE"
    assert trigger.on_element("x", 0, tw(0, 2), _Ctx(2)).name == "FIRE"
    trigger.clear(tw(0, 2), ctx)
    assert ctx.timers == []


def test_merging_window_set_add_and_merge() -> None:
    """MergingWindowSetTest::testIncrementalMerging: merge results keep the first window's state
    window; adding a window inside an existing one is no merge."""
    calls: list[Any] = []
    windows = MergingWindowSet(EventTimeSessionWindows.with_gap(3), {})
    assert windows.add_window(tw(0, 1), lambda *a: calls.append(a)) == tw(0, 1)
    assert calls == [] and windows.get_state_window(tw(0, 1)) == tw(0, 1)
    assert windows.add_window(tw(0, 1), lambda *a: calls.append(a)) == tw(0, 1)
    assert calls == []  # the same window again: merged into itself, no merge call
    assert windows.add_window(tw(3, 6), lambda *a: calls.append(a)) == tw(3, 6)
    assert windows.add_window(tw(1, 3), lambda *a: calls.append(a)) == tw(0, 6)
    assert calls == [(tw(0, 6), [tw(0, 1), tw(3, 6)], tw(0, 1), [tw(3, 6)])]
    assert windows.mapping == {tw(0, 6): tw(0, 1)}
    windows.retire_window(tw(0, 6))
    assert windows.mapping == {}


@pytest.mark.parametrize("make, key", [
    (lambda: TumblingEventTimeWindows.of(timedelta(microseconds=500)), r"TumblingEventTimeWindows.of\(size\)"),
    (lambda: TumblingProcessingTimeWindows.of(0), r"TumblingProcessingTimeWindows.of\(size\)"),
    (lambda: SlidingEventTimeWindows.of(Time.seconds(1), Time.milliseconds(0)), r"SlidingEventTimeWindows.of\(slide\)"),
    (lambda: EventTimeSessionWindows.with_gap(timedelta(0)), r"EventTimeSessionWindows.with_gap\(size\)"),
    (lambda: TumblingEventTimeWindows.of(1000, 1000), r"TumblingEventTimeWindows.of\(offset\)"),
    (lambda: CountTrigger.of(0), r"CountTrigger.of\(count\)"),
])
def test_window_smaller_than_1_ms_is_refused(make: Any, key: str) -> None:
    """Issue 30: a window smaller than 1 ms is a clear error naming the argument (Flink:
    "TumblingEventTimeWindows parameters must satisfy abs(offset) < size")."""
    with pytest.raises(ConfigError, match=key):
        make()


def test_negative_lateness_names_the_operator() -> None:
    """Issue 30: lateness < 0 is refused, naming the operator (Flink: allowedLateness >= 0)."""
    with pytest.raises(ConfigError, match=r"allowed_lateness of operator 'per-minute': must be at least 0 ms, got -1 ms"):
        WindowEngine("per-minute", TumblingEventTimeWindows.of(Time.minutes(1)), reduce_function=max,
                     allowed_lateness=timedelta(milliseconds=-1))


def test_merging_assigner_needs_a_merging_trigger() -> None:
    """WindowOperatorBuilder: "A merging window assigner cannot be used with a trigger that does not support merging."."""
    class NoMerge(EventTimeTrigger):
        def can_merge(self) -> bool:
            return False

    with pytest.raises(ConfigError, match="cannot be used with a trigger that does not support merging"):
        WindowEngine("s", EventTimeSessionWindows.with_gap(10), trigger=NoMerge(), reduce_function=max)


def test_event_time_window_without_timestamps_is_refused() -> None:
    """TumblingEventTimeWindows: a record without a timestamp (Long.MIN_VALUE) names the fix."""
    engine = WindowEngine("w", TumblingEventTimeWindows.of(10), reduce_function=max)
    with pytest.raises(ConfigError, match=r"assign_timestamps_and_watermarks"):
        engine.process_element(1, None, key=1)


def test_session_merge_behind_the_watermark_is_refused() -> None:
    """WindowOperator's merge function: a merge may not end a window before the watermark."""
    class Shrinking(EventTimeSessionWindows):
        def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
            return [tw(timestamp, timestamp + (100 if element == "long" else 1))]

        def merge_windows(self, windows: Any, callback: Any) -> None:
            windows = sorted(windows)
            if len(windows) > 1:
                callback(windows, tw(0, 5))  # a merge result that ends earlier

    engine = WindowEngine("s", Shrinking(10), reduce_function=max)
    engine.process_element("long", 0, key=1)
    engine.advance_watermark(10)
    with pytest.raises(JobError, match="cannot become earlier than the current watermark by merging"):
        engine.process_element("short", 50, key=1)


def test_global_windows_never_fire_by_default() -> None:
    """GlobalWindowsTest: the default trigger never fires, even at the end of input."""
    engine = WindowEngine("g", GlobalWindows.create(), reduce_function=max)
    engine.process_element(3, 1, key="k")
    assert engine.advance_watermark(2**63 - 1).records == []
