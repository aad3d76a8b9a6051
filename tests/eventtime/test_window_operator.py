"""Flink's ``WindowOperatorTest`` (flink-streaming-java/src/test/java/org/apache/flink/streaming/
runtime/operators/windowing/WindowOperatorTest.java) ported to the pure window engine: the same
elements, watermarks and processing times in, the same records (value, timestamp) and
watermarks out, compared as Flink does (sorted between watermarks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from accelflow.dataflow.eventtime import (
    MAX_TIMESTAMP, ContinuousEventTimeTrigger, CountTrigger, DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows, EventTimeSessionWindows, EventTimeTrigger, GlobalWindows,
    OutputTag, ProcessingTimeSessionWindows, ProcessWindowFunction, PurgingTrigger,
    SlidingEventTimeWindows, SlidingProcessingTimeWindows, TimeWindow, Trigger, TriggerResult,
    TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowFunction)
from accelflow.runtime.subtask._window_engine import WindowEngine
from evtime_harness import CHUNKED, Harness, assert_output, sum_reducer

LATE = OutputTag("late-output")


@pytest.fixture(autouse=True, params=["one-by-one", "chunked"])
def chunked(request: pytest.FixtureRequest) -> Any:
    """Every scenario twice: elements one by one (``process_element``), and the elements fed
    between two watermarks as one chunk (``process_chunk``, as a subtask does): the same
    output either way."""
    CHUNKED["on"] = request.param == "chunked"
    yield
    CHUNKED["on"] = False


class RichSumReducer(WindowFunction):
    """``RichSumReducer``: (key, sum of the second fields); checks ``open`` ran first."""

    def open(self, runtime_context: Any) -> None:
        self.opened = True

    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        assert self.opened
        yield (key, sum(v[1] for v in inputs))


class SessionWindowFunction(WindowFunction):
    """``SessionWindowFunction``: ("key-sum", window start, window end)."""

    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        yield (f"{key}-{sum(v[1] for v in inputs)}", window.start, window.end)


class SessionProcessWindowFunction(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        window = context.window()
        yield (f"{key}-{sum(v[1] for v in elements)}", window.start, window.end)


class ReducedSessionWindowFunction(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        for value in inputs:
            yield (f"{key}-{value[1]}", window.start, window.end)


def engine(assigner: Any, **kwargs: Any) -> Callable[[], WindowEngine]:
    return lambda: WindowEngine("window", assigner, **kwargs)


def reduce_op(assigner: Any, **kwargs: Any) -> Callable[[], WindowEngine]:
    return engine(assigner, reduce_function=sum_reducer, **kwargs)


def apply_op(assigner: Any, fn: Any = RichSumReducer, **kwargs: Any) -> Callable[[], WindowEngine]:
    return engine(assigner, window_function=fn, **kwargs)


def _feed_out_of_order(h: Harness) -> None:
    for value, ts in [(("key2", 1), 3999), (("key2", 1), 3000), (("key1", 1), 20), (("key1", 1), 0),
                      (("key1", 1), 999), (("key2", 1), 1998), (("key2", 1), 1999), (("key2", 1), 1000)]:
        h.element(value, ts)


SLIDING = SlidingEventTimeWindows.of(3000, 1000)
TUMBLING = TumblingEventTimeWindows.of(3000)


@pytest.mark.parametrize("make", [reduce_op(SLIDING), apply_op(SLIDING)], ids=["reduce", "apply"])
def test_sliding_event_time_windows(make: Callable[[], WindowEngine]) -> None:
    """WindowOperatorTest::testSlidingEventTimeWindowsReduce and ::testSlidingEventTimeWindowsApply
    (snapshot, then restore into a new operator midway)."""
    h = Harness(make())
    _feed_out_of_order(h)
    h.watermark(999).watermark(1999).watermark(2999)
    assert_output([(("key1", 3), 999), 999, (("key1", 3), 1999), (("key2", 3), 1999), 1999,
                   (("key1", 3), 2999), (("key2", 3), 2999), 2999], h.output)
    h = h.restored(make)
    for wm in (3999, 4999, 5999, 6999, 7999):
        h.watermark(wm)
    assert_output([(("key2", 5), 3999), 3999, (("key2", 2), 4999), 4999, (("key2", 2), 5999), 5999, 6999, 7999],
                  h.output)


@pytest.mark.parametrize("make", [reduce_op(TUMBLING), apply_op(TUMBLING)], ids=["reduce", "apply"])
def test_tumbling_event_time_windows(make: Callable[[], WindowEngine]) -> None:
    """WindowOperatorTest::testTumblingEventTimeWindowsReduce and ::testTumblingEventTimeWindowsApply."""
    h = Harness(make())
    _feed_out_of_order(h)
    h.watermark(999).watermark(1999)
    assert_output([999, 1999], h.output)
    h = h.restored(make)
    for wm in (2999, 3999, 4999, 5999, 6999, 7999):
        h.watermark(wm)
    assert_output([(("key1", 3), 2999), (("key2", 3), 2999), 2999, 3999, 4999, (("key2", 2), 5999), 5999, 6999, 7999],
                  h.output)


SESSIONS = EventTimeSessionWindows.with_gap(3000)


def _sessions_scenario(make: Callable[[], WindowEngine], key1_before_snapshot: bool) -> None:
    h = Harness(make())
    h.element(("key2", 1), 0).element(("key2", 2), 1000).element(("key2", 3), 2500)
    if key1_before_snapshot:
        h.element(("key1", 1), 10).element(("key1", 2), 1000)
    assert h.output == []
    h = h.restored(make)
    if not key1_before_snapshot:
        h.element(("key1", 1), 10).element(("key1", 2), 1000)
    h.element(("key1", 3), 2500)
    h.element(("key2", 4), 5501).element(("key2", 5), 6000).element(("key2", 5), 6000).element(("key2", 6), 6050)
    h.watermark(12000)
    h.element(("key2", 10), 15000).element(("key2", 20), 15000)
    h.watermark(17999)
    assert_output([(("key1-6", 10, 5500), 5499), (("key2-6", 0, 5500), 5499), (("key2-20", 5501, 9050), 9049), 12000,
                   (("key2-30", 15000, 18000), 17999), 17999], h.output)


def test_session_windows() -> None:
    """WindowOperatorTest::testSessionWindows."""
    _sessions_scenario(apply_op(SESSIONS, SessionWindowFunction), key1_before_snapshot=True)


def test_session_windows_with_process_function() -> None:
    """WindowOperatorTest::testSessionWindowsWithProcessFunction."""
    _sessions_scenario(apply_op(SESSIONS, SessionProcessWindowFunction), key1_before_snapshot=True)


def test_reduce_session_windows() -> None:
    """WindowOperatorTest::testReduceSessionWindows (a reduce, then a window function)."""
    _sessions_scenario(reduce_op(SESSIONS, window_function=ReducedSessionWindowFunction), key1_before_snapshot=False)


def test_session_windows_with_count_trigger() -> None:
    """WindowOperatorTest::testSessionWindowsWithCountTrigger: merging sessions merge the
    trigger's count."""
    make = apply_op(SESSIONS, SessionWindowFunction, trigger=PurgingTrigger.of(CountTrigger.of(4)))
    h = Harness(make())
    for value, ts in [(("key2", 1), 0), (("key2", 2), 1000), (("key2", 3), 2500), (("key2", 4), 3500),
                      (("key1", 1), 10), (("key1", 2), 1000)]:
        h.element(value, ts)
    assert h.output == [(("key2-10", 0, 6500), 6499)]
    h = h.restored(make)
    for value, ts in [(("key1", 3), 2500), (("key1", 1), 6000), (("key1", 2), 6500), (("key1", 3), 7000)]:
        h.element(value, ts)
    assert h.output == []
    h.element(("key1", 10), 4500)  # merges the two key1 sessions: count 6 fires
    assert h.output == [(("key1-22", 10, 10000), 9999)]


def test_session_windows_with_continuous_event_time_trigger() -> None:
    """WindowOperatorTest::testSessionWindowsWithContinuousEventTimeTrigger."""
    make = apply_op(SESSIONS, SessionWindowFunction, trigger=ContinuousEventTimeTrigger.of(2000))
    h = Harness(make())
    h.element(("key1", 1), 1500).element(("key2", 1), 0).element(("key2", 3), 2500).element(("key2", 2), 1000)
    h.watermark(2500)
    h.element(("key2", 5), 4000)
    h.watermark(3000)
    assert_output([(("key1-1", 1500, 4500), 4499), (("key2-6", 0, 5500), 5499), 2500, 3000], h.output)
    h = h.restored(make)
    h.element(("key1", 2), 4000).element(("key2", 4), 3500)
    h.watermark(4000)
    assert_output([(("key1-3", 1500, 7000), 6999), (("key2-15", 0, 7000), 6999), 4000], h.output)


class PointSessionWindows(EventTimeSessionWindows):
    """Elements whose second field is 33 get a point window [t, t)."""

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        if element[1] == 33:
            return [TimeWindow(timestamp, timestamp)]
        return super().assign_windows(element, timestamp, context)


def test_point_sessions() -> None:
    """WindowOperatorTest::testPointSessions."""
    make = apply_op(PointSessionWindows(3000), SessionWindowFunction)
    h = Harness(make())
    h.element(("key2", 1), 0).element(("key2", 33), 1000)
    h = h.restored(make)
    h.element(("key2", 33), 2500).element(("key1", 1), 10).element(("key1", 2), 1000).element(("key1", 33), 2500)
    h.watermark(12000)
    assert_output([(("key1-36", 10, 4000), 3999), (("key2-67", 0, 3000), 2999), 12000], h.output)


def test_continuous_watermark_trigger() -> None:
    """WindowOperatorTest::testContinuousWatermarkTrigger (global windows)."""
    h = Harness(reduce_op(GlobalWindows.create(), trigger=ContinuousEventTimeTrigger.of(3000))())
    h.element(("key1", 1), 0)
    for value, ts in [(("key2", 1), 3000), (("key2", 1), 3999), (("key1", 1), 20), (("key1", 1), 999),
                      (("key2", 1), 1998), (("key2", 1), 1999), (("key2", 1), 1000)]:
        h.element(value, ts)
    for wm in (1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000):
        h.watermark(wm)
    assert_output([1000, 2000, (("key1", 3), MAX_TIMESTAMP), 3000, 4000, 5000, (("key1", 3), MAX_TIMESTAMP),
                   (("key2", 5), MAX_TIMESTAMP), 6000, 7000, 8000], h.output)


def test_count_trigger() -> None:
    """WindowOperatorTest::testCountTrigger (global windows, purging count of 4, restored midway)."""
    make = reduce_op(GlobalWindows.create(), trigger=PurgingTrigger.of(CountTrigger.of(4)))
    h = Harness(make())
    for value, ts in [(("key2", 1), 3000), (("key2", 1), 3999), (("key1", 1), 20), (("key1", 1), 0),
                      (("key1", 1), 999), (("key2", 1), 1998), (("key2", 1), 1999)]:
        h.element(value, ts)
    before = h.output
    h = h.restored(make)
    h.element(("key2", 1), 1000)
    assert before + h.output == [(("key2", 4), MAX_TIMESTAMP)]
    h.element(("key1", 1), 10999).element(("key2", 1), 1000).element(("key2", 1), 1000).element(("key2", 1), 1000)
    assert_output([(("key2", 4), MAX_TIMESTAMP), (("key1", 4), MAX_TIMESTAMP), (("key2", 4), MAX_TIMESTAMP)],
                  before + h.output)


def test_processing_time_tumbling_windows() -> None:
    """WindowOperatorTest::testProcessingTimeTumblingWindows."""
    h = Harness(reduce_op(TumblingProcessingTimeWindows.of(3000))())
    h.processing_time(3)
    for value, ts in [(("key2", 1), MAX_TIMESTAMP), (("key2", 1), 7000), (("key2", 1), 7000),
                      (("key1", 1), 7000), (("key1", 1), 7000)]:
        h.element(value, ts)
    h.processing_time(5000)
    assert_output([(("key2", 3), 2999), (("key1", 2), 2999)], h.output)
    h.element(("key1", 1), 7000).element(("key1", 1), 7000).element(("key1", 1), 7000)
    h.processing_time(7000)
    assert_output([(("key2", 3), 2999), (("key1", 2), 2999), (("key1", 3), 5999)], h.output)


def test_processing_time_sliding_windows() -> None:
    """WindowOperatorTest::testProcessingTimeSlidingWindows."""
    h = Harness(reduce_op(SlidingProcessingTimeWindows.of(3000, 1000))())
    h.processing_time(3).element(("key2", 1), MAX_TIMESTAMP).processing_time(1000)
    assert h.output == [(("key2", 1), 999)]
    h.element(("key2", 1), MAX_TIMESTAMP).element(("key2", 1), MAX_TIMESTAMP).processing_time(2000)
    h.element(("key1", 1), MAX_TIMESTAMP).element(("key1", 1), MAX_TIMESTAMP).processing_time(3000)
    for _ in range(3):
        h.element(("key1", 1), MAX_TIMESTAMP)
    h.processing_time(7000)
    assert_output([(("key2", 1), 999), (("key2", 3), 1999), (("key2", 3), 2999), (("key1", 2), 2999),
                   (("key2", 2), 3999), (("key1", 5), 3999), (("key1", 5), 4999), (("key1", 3), 5999)], h.output)


def test_processing_time_session_windows() -> None:
    """WindowOperatorTest::testProcessingTimeSessionWindows."""
    h = Harness(reduce_op(ProcessingTimeSessionWindows.with_gap(3000))())
    h.processing_time(3).element(("key2", 1), 1).processing_time(1000).element(("key2", 1), 1002)
    h.processing_time(5000)
    assert h.output == [(("key2", 2), 3999)]
    for key in ("key2", "key2", "key1", "key1", "key1"):
        h.element((key, 1), 5000)
    h.processing_time(10000)
    assert_output([(("key2", 2), 3999), (("key2", 2), 7999), (("key1", 3), 7999)], h.output)


def _gap(element: Any) -> int:
    """The mocked ``SessionWindowTimeGapExtractor`` of the dynamic session tests."""
    if element[0] == "key1":
        return 3000
    return 1000 if element[1] == 10 else 2000


def test_dynamic_event_time_session_windows() -> None:
    """WindowOperatorTest::testDynamicEventTimeSessionWindows."""
    h = Harness(apply_op(DynamicEventTimeSessionWindows.with_dynamic_gap(_gap), SessionWindowFunction)())
    h.element(("key1", 3), 10).element(("key2", 4), 5000).element(("key2", 5), 6000).watermark(8999)
    h.element(("key2", 1), 9000).element(("key2", 2), 10000).element(("key2", 10), 10500).watermark(12999)
    h.element(("key2", 10), 13000).element(("key2", 10), 13500).element(("key2", 1), 14000).watermark(16999)
    assert_output([(("key1-3", 10, 3010), 3009), (("key2-9", 5000, 8000), 7999), 8999,
                   (("key2-13", 9000, 12000), 11999), 12999, (("key2-21", 13000, 16000), 15999), 16999], h.output)


def test_dynamic_processing_time_session_windows() -> None:
    """WindowOperatorTest::testDynamicProcessingTimeSessionWindows."""
    h = Harness(apply_op(DynamicProcessingTimeSessionWindows.with_dynamic_gap(_gap), SessionWindowFunction)())
    for now, value in [(10, ("key1", 3)), (5000, ("key2", 4)), (6000, ("key2", 5)), (8999, None),
                       (9000, ("key2", 1)), (10000, ("key2", 2)), (10500, ("key2", 10)), (13000, ("key2", 10)),
                       (13500, ("key2", 10)), (14000, ("key2", 1)), (16999, None)]:
        h.processing_time(now)
        if value is not None:
            h.element(value, now)
    assert_output([(("key1-3", 10, 3010), 3009), (("key2-9", 5000, 8000), 7999),
                   (("key2-13", 9000, 12000), 11999), (("key2-21", 13000, 16000), 15999)], h.output)


def test_lateness() -> None:
    """WindowOperatorTest::testLateness: a late firing within the allowed lateness, then a
    late element to the side output."""
    h = Harness(reduce_op(TumblingEventTimeWindows.of(2000), trigger=PurgingTrigger.of(EventTimeTrigger.create()),
                          allowed_lateness=500, late_data_output_tag=LATE)())
    h.element(("key2", 1), 500).watermark(1500).element(("key2", 1), 1300).watermark(2300)
    h.element(("key2", 1), 1997).watermark(6000)
    h.element(("key2", 1), 1998).watermark(7000)
    assert_output([1500, (("key2", 2), 1999), 2300, (("key2", 1), 1999), 6000, 7000], h.output)
    assert h.side == {"late-output": [(("key2", 1), 1998)]}


def test_cleanup_time_overflow() -> None:
    """WindowOperatorTest::testCleanupTimeOverflow: the cleanup timer of a window near
    Long.MAX_VALUE must not wrap around and drop the window early."""
    assigner = TumblingEventTimeWindows.of(1000)
    h = Harness(reduce_op(assigner, allowed_lateness=2000)())
    timestamp = MAX_TIMESTAMP - 1750
    (window,) = assigner.assign_windows(("key2", 1), timestamp, None)
    h.element(("key2", 1), timestamp).watermark(MAX_TIMESTAMP - 1500).watermark(window.max_timestamp())
    assert_output([MAX_TIMESTAMP - 1500, (("key2", 1), window.max_timestamp()), window.max_timestamp()], h.output)


def test_side_output_due_to_lateness_tumbling() -> None:
    """WindowOperatorTest::testSideOutputDueToLatenessTumbling."""
    h = Harness(reduce_op(TumblingEventTimeWindows.of(2000), late_data_output_tag=LATE)())
    h.element(("key2", 1), 1000).watermark(1985).element(("key2", 1), 1980).watermark(1999)
    h.element(("key2", 1), 1998).element(("key2", 1), 2001).watermark(2999).watermark(3999)
    assert_output([1985, (("key2", 2), 1999), 1999, 2999, (("key2", 1), 3999), 3999], h.output)
    assert h.side == {"late-output": [(("key2", 1), 1998)]}


def test_side_output_due_to_lateness_sliding() -> None:
    """WindowOperatorTest::testSideOutputDueToLatenessSliding."""
    h = Harness(reduce_op(SlidingEventTimeWindows.of(3000, 1000), late_data_output_tag=LATE)())
    h.element(("key2", 1), 1000).watermark(1999).element(("key2", 1), 2000).watermark(3000)
    for value, ts in [(("key1", 1), 3001), (("key2", 1), 2400), (("key2", 1), 2400), (("key1", 1), 3001),
                      (("key2", 1), 3900)]:
        h.element(value, ts)
    h.watermark(6000).element(("key1", 1), 3001).watermark(25000)
    assert_output([(("key2", 1), 1999), 1999, (("key2", 2), 2999), 3000,
                   (("key2", 5), 3999), (("key1", 2), 3999), (("key2", 4), 4999), (("key1", 2), 4999),
                   (("key2", 1), 5999), (("key1", 2), 5999), 6000, 25000], h.output)
    assert h.side == {"late-output": [(("key1", 1), 3001)]}


def _late_sessions(trigger: Trigger, lateness: int, tail: list[Any]) -> Harness:
    """The shared start of the late session tests: two sessions merged, then a new one."""
    h = Harness(reduce_op(SESSIONS, window_function=ReducedSessionWindowFunction, trigger=trigger,
                          allowed_lateness=lateness, late_data_output_tag=LATE)())
    h.element(("key2", 1), 1000).watermark(1999).element(("key2", 1), 2000).watermark(4998)
    h.element(("key2", 1), 4500).element(("key2", 1), 8500).watermark(7400)
    h.element(("key2", 1), 7000).watermark(11501)
    h.element(("key2", 1), 11600).watermark(14600)
    for step in tail:
        h.element(("key2", 1), step) if step < 20000 else h.watermark(step)
    return h


HEAD = [1999, 4998, 7400, (("key2-5", 1000, 11500), 11499), 11501, (("key2-1", 11600, 14600), 14599), 14600]


@pytest.mark.parametrize("trigger", [PurgingTrigger.of(EventTimeTrigger.create()), EventTimeTrigger.create()],
                         ids=["purging", "accumulating"])
def test_side_output_due_to_lateness_session_zero_lateness(trigger: Trigger) -> None:
    """WindowOperatorTest::testSideOutputDueToLatenessSessionZeroLatenessPurgingTrigger and
    ::testSideOutputDueToLatenessSessionZeroLateness: late elements are not merged into
    (nor with) a session already dropped."""
    purging = isinstance(trigger, PurgingTrigger)
    h = _late_sessions(trigger, 0, [10000] + ([10100] if purging else []) + [14500, 20000, 100000])
    assert_output(HEAD + [(("key2-1", 14500, 17500), 17499), 20000, 100000], h.output)
    assert h.side == {"late-output": [(("key2", 1), 10000)] + ([(("key2", 1), 10100)] if purging else [])}


def test_drop_due_to_lateness_session_with_lateness_purging_trigger() -> None:
    """WindowOperatorTest::testDropDueToLatenessSessionWithLatenessPurgingTrigger."""
    h = _late_sessions(PurgingTrigger.of(EventTimeTrigger.create()), 10, [10000, 14500, 20000, 100000])
    assert_output(HEAD + [(("key2-1", 10000, 14600), 14599), (("key2-1", 10000, 17500), 17499), 20000, 100000],
                  h.output)


def test_not_side_output_due_to_lateness_session_with_lateness() -> None:
    """WindowOperatorTest::testNotSideOutputDueToLatenessSessionWithLateness."""
    h = _late_sessions(EventTimeTrigger.create(), 10, [10000, 14500])
    assert_output(HEAD + [(("key2-2", 10000, 14600), 14599)], h.output)
    h.watermark(20000).watermark(100000)
    assert_output(HEAD + [(("key2-2", 10000, 14600), 14599), (("key2-3", 10000, 17500), 17499), 20000, 100000],
                  h.output)
    assert h.side == {}


@pytest.mark.parametrize("trigger, fired", [
    (PurgingTrigger.of(EventTimeTrigger.create()), ["key2-1", "key2-1"]),
    (EventTimeTrigger.create(), ["key2-7", "key2-8"]),
], ids=["purging", "accumulating"])
def test_not_side_output_due_to_lateness_session_with_huge_lateness(trigger: Trigger, fired: list[str]) -> None:
    """WindowOperatorTest::testNotSideOutputDueToLatenessSessionWithHugeLatenessPurgingTrigger and
    ::testNotSideOutputDueToLatenessSessionWithHugeLateness."""
    h = _late_sessions(trigger, 10000, [10000, 14500, 20000, 100000])
    assert_output(HEAD + [((fired[0], 1000, 14600), 14599), ((fired[1], 1000, 17500), 17499), 20000, 100000],
                  h.output)
    assert h.side == {}


class PassThrough(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        yield from inputs


@pytest.mark.parametrize("make", [
    apply_op(TumblingEventTimeWindows.of(2000), PassThrough, allowed_lateness=1),
    reduce_op(TumblingEventTimeWindows.of(2000), allowed_lateness=1),
], ids=["list", "reduce"])
def test_cleanup_timer_with_empty_state_for_tumbling_windows(make: Callable[[], WindowEngine]) -> None:
    """WindowOperatorTest::testCleanupTimerWithEmptyListStateForTumblingWindows and
    ::testCleanupTimerWithEmptyReduceStateForTumblingWindows."""
    h = Harness(make())
    h.element(("key2", 1), 1000)
    for wm in (1599, 1999, 2000, 5000):
        h.watermark(wm)
    assert_output([1599, (("key2", 1), 1999), 1999, 2000, 5000], h.output)
    assert h.engine.timers.num_event_time_timers() == 0
    assert h.engine.backend.snapshot() == {}


@pytest.mark.parametrize("make, result", [
    (apply_op(SESSIONS, PassThrough, allowed_lateness=10), ("key2", 1)),
    (reduce_op(SESSIONS, window_function=ReducedSessionWindowFunction, allowed_lateness=10), ("key2-1", 1000, 4000)),
], ids=["list", "reduce"])
def test_cleanup_timer_with_empty_state_for_session_windows(make: Callable[[], WindowEngine], result: Any) -> None:
    """WindowOperatorTest::testCleanupTimerWithEmptyListStateForSessionWindows and
    ::testCleanupTimerWithEmptyReduceStateForSessionWindows."""
    h = Harness(make())
    h.element(("key2", 1), 1000).watermark(4998).watermark(14600)
    assert_output([(result, 3999), 4998, 14600], h.output)
    assert h.engine.backend.snapshot() == {}


class EventTimeTriggerAccumGC(Trigger):
    """Fires at the window's end and at the end of the lateness, never purging by itself."""

    def __init__(self, cleanup_time: int) -> None:
        self.cleanup_time = cleanup_time

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        due = time in (window.max_timestamp(), window.max_timestamp() + self.cleanup_time)
        return TriggerResult.FIRE_AND_PURGE if due else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class GotFunction(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        yield "GOT: " + ",".join(f"({k},{v})" for k, v in inputs)


def test_cleanup_timer_with_empty_list_state_for_tumbling_windows_2() -> None:
    """WindowOperatorTest::testCleanupTimerWithEmptyListStateForTumblingWindows2: the cleanup
    timer of an already purged window emits nothing."""
    h = Harness(apply_op(TumblingEventTimeWindows.of(2000), GotFunction, trigger=EventTimeTriggerAccumGC(100),
                         allowed_lateness=100)())
    h.element(("key2", 1), 1000)
    for wm in (1599, 1999, 2100, 5000):
        h.watermark(wm)
    assert_output([1599, ("GOT: (key2,1)", 1999), 1999, 2100, 5000], h.output)


class PerWindowCounter(ProcessWindowFunction):
    """Counts firings per window (window state) and per key (global state), side-outputs them."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        from accelflow.dataflow.eventtime import ValueStateDescriptor

        firings = context.window_state().get_state(ValueStateDescriptor("firings"))
        total = context.global_state().get_state(ValueStateDescriptor("total"))
        firings.update((firings.value() or 0) + 1)
        total.update((total.value() or 0) + 1)
        context.output(OutputTag("firings"), (key, firings.value(), total.value()))
        yield (key, context.window().start, len(list(elements)))

    def clear(self, context: Any) -> None:
        from accelflow.dataflow.eventtime import ValueStateDescriptor

        context.window_state().get_state(ValueStateDescriptor("firings")).clear()


def test_per_window_state_set_and_cleared() -> None:
    """WindowOperatorContractTest::testPerWindowStateSetAndClearedOnEventTimeClear: window_state()
    is per window and cleared with it, global_state() per key; context.output carries the
    window's max timestamp."""
    h = Harness(apply_op(TumblingEventTimeWindows.of(10), PerWindowCounter, allowed_lateness=5)())
    h.element(("k", 1), 1).watermark(9).element(("k", 1), 2).watermark(30).element(("k", 1), 32).watermark(40).watermark(50)
    assert h.records() == [(("k", 0, 1), 9), (("k", 0, 2), 9), (("k", 30, 1), 39)]
    assert h.side["firings"] == [(("k", 1, 1), 9), (("k", 2, 2), 9), (("k", 1, 3), 39)]
    assert {name for name, table in h.engine.backend.tables.items() if table} == {"total"}
