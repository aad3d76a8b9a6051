"""Watermark generation and combination, ported from Flink's BoundedOutOfOrdernessWatermarksTest,
WatermarksWithIdlenessTest (flink-core/src/test/java/org/apache/flink/api/common/eventtime/) and
StatusWatermarkValveTest (flink-streaming-java/src/test/java/org/apache/flink/streaming/runtime/
watermarkstatus/), plus the bad timestamp assigners of issue 30."""

from __future__ import annotations

from datetime import timedelta

import pytest

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow.eventtime import MIN_TIMESTAMP, Duration, Time, WatermarkStrategy
from accelflow.runtime.subtask._watermarks import (
    IdlenessTimer, StatusWatermarkValve, TimestampsAndWatermarks, Watermark, WatermarkStatus)

IDLE, ACTIVE = WatermarkStatus.IDLE, WatermarkStatus.ACTIVE


def bounded(ms: int) -> TimestampsAndWatermarks:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=ms))
    return TimestampsAndWatermarks(strategy.with_timestamp_assigner(lambda v, ts: v), "assign")


def test_watermark_before_records() -> None:
    """BoundedOutOfOrdernessWatermarksTest::testWatermarkBeforeRecords."""
    assert bounded(10).current_watermark() == MIN_TIMESTAMP


def test_watermark_after_event() -> None:
    """BoundedOutOfOrdernessWatermarksTest::testWatermarkAfterEvent."""
    gen = bounded(10)
    gen.process_element(1337)
    assert gen.on_periodic_emit(0) == [Watermark(1326)]


def test_watermark_after_non_monotonous_events() -> None:
    """BoundedOutOfOrdernessWatermarksTest::testWatermarkAfterNonMonotonousEvents."""
    gen = bounded(10)
    for ts in (12345, 12300, 12340, 12280):
        gen.process_element(ts)
    assert gen.on_periodic_emit(0) == [Watermark(12334)]


def test_repeated_probe() -> None:
    """BoundedOutOfOrdernessWatermarksTest::testRepeatedProbe: the watermark stays, and is
    emitted once."""
    gen = bounded(10)
    gen.process_element(723456)
    assert gen.on_periodic_emit(0) == [Watermark(723445)]
    assert gen.on_periodic_emit(0) == [] and gen.current_watermark() == 723445


@pytest.mark.parametrize("timeout", [timedelta(0), timedelta(milliseconds=-1)])
def test_zero_or_negative_idle_timeout_is_refused(timeout: timedelta) -> None:
    """WatermarksWithIdlenessTest::testZeroTimeout and ::testNegativeTimeout."""
    with pytest.raises(ConfigError, match=r"with_idleness\(idle_timeout\)"):
        WatermarkStrategy.for_monotonous_timestamps().with_idleness(timeout)


def test_idleness_timer() -> None:
    """WatermarksWithIdlenessTest::testInitiallyActive, ::testIdleWithoutEvents,
    ::testRepeatedIdleChecks, ::testActiveAfterIdleness and ::testIdleActiveIdle."""
    timer = IdlenessTimer(10)
    assert not timer.check_if_idle(1000)  # initially active; starts the timer
    assert timer.check_if_idle(1011)
    assert timer.check_if_idle(1111)  # repeated checks stay idle
    timer.activity()
    assert not timer.check_if_idle(1112)
    assert not timer.check_if_idle(1113)  # starts the timer again
    assert not timer.check_if_idle(1123)
    assert timer.check_if_idle(1124)


def test_generator_marks_idle_then_active_again() -> None:
    """WatermarksWithIdleness: IDLE once after the timeout, ACTIVE with the next record."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v)
    gen = TimestampsAndWatermarks(strategy.with_idleness(Duration.of_millis(100)), "assign")
    assert gen.process_element(5) == (5, [])
    assert gen.on_periodic_emit(0) == [Watermark(4)]
    assert gen.on_periodic_emit(50) == []  # no activity since: the timer starts
    assert gen.on_periodic_emit(151) == [IDLE]
    assert gen.on_periodic_emit(300) == []
    assert gen.process_element(7) == (7, [ACTIVE])
    assert gen.on_periodic_emit(301) == [Watermark(6)]


@pytest.mark.parametrize("returned", [None, "1000", 1.5])
def test_timestamp_assigner_returning_no_int_names_the_operator(returned: object) -> None:
    """Issue 30: a timestamp assigner that returns None or a str is a clear error naming the operator."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: returned)
    with pytest.raises(JobError, match=r"operator 'parse-events': the timestamp assigner .* returned") as caught:
        TimestampsAndWatermarks(strategy, "parse-events").process_element({"id": 1})
    assert "epoch milliseconds" in str(caught.value)


def test_strategy_accepts_pyflink_durations() -> None:
    """PyFlink's ``Duration``/``Time`` and ``timedelta`` are the same 5 s."""
    delays = {WatermarkStrategy.for_bounded_out_of_orderness(d).max_out_of_orderness_ms
              for d in (timedelta(seconds=5), Duration.of_seconds(5), Time.seconds(5), 5000)}
    assert delays == {5000}
    with pytest.raises(ConfigError, match="for_bounded_out_of_orderness"):
        WatermarkStrategy.for_bounded_out_of_orderness("5s")


def test_single_input_increasing_and_decreasing_watermarks() -> None:
    """StatusWatermarkValveTest::testSingleInputIncreasingWatermarks and
    ::testSingleInputDecreasingWatermarksYieldsNoOutput."""
    valve = StatusWatermarkValve(1)
    assert valve.input_watermark(0, 0) == [Watermark(0)]
    assert valve.input_watermark(25, 0) == [Watermark(25)]
    assert valve.input_watermark(18, 0) == []
    assert valve.input_watermark(42, 0) == [Watermark(42)]


def test_single_input_status_toggling_keeps_watermark() -> None:
    """StatusWatermarkValveTest::testSingleInputWatermarkStatusToggling and
    ::testSingleInputWatermarksIntactDuringIdleness."""
    valve = StatusWatermarkValve(1)
    assert valve.input_watermark_status(ACTIVE, 0) == []
    assert valve.input_watermark(25, 0) == [Watermark(25)]
    assert valve.input_watermark_status(IDLE, 0) == [IDLE]
    assert valve.input_watermark_status(IDLE, 0) == []
    assert valve.input_watermark(50, 0) == [] and valve.watermarks[0] == 25
    assert valve.input_watermark_status(ACTIVE, 0) == [ACTIVE]
    assert valve.input_watermark(50, 0) == [Watermark(50)]


def test_multiple_inputs_yield_the_minimum() -> None:
    """StatusWatermarkValveTest::testMultipleInputYieldsWatermarkOnlyWhenAllChannelsReceivesWatermarks,
    ::testMultipleInputIncreasingWatermarks and ::testMultipleInputDecreasingWatermarksYieldsNoOutput."""
    valve = StatusWatermarkValve(3)
    assert valve.input_watermark(0, 0) + valve.input_watermark(0, 1) == []
    assert valve.input_watermark(0, 2) == [Watermark(0)]
    assert valve.input_watermark(12, 0) + valve.input_watermark(8, 2) + valve.input_watermark(10, 2) == []
    assert valve.input_watermark(15, 1) == [Watermark(10)]
    assert valve.input_watermark(17, 2) == [Watermark(12)]
    assert valve.input_watermark(20, 0) == [Watermark(15)]
    decreasing = StatusWatermarkValve(3)
    assert decreasing.input_watermark(25, 0) + decreasing.input_watermark(10, 1) == []
    assert decreasing.input_watermark(17, 2) == [Watermark(10)]
    assert decreasing.input_watermark(12, 0) + decreasing.input_watermark(8, 1) + decreasing.input_watermark(15, 2) == []


def test_multiple_input_status_toggling() -> None:
    """StatusWatermarkValveTest::testMultipleInputWatermarkStatusToggling."""
    valve = StatusWatermarkValve(2)
    assert valve.input_watermark_status(ACTIVE, 0) + valve.input_watermark_status(ACTIVE, 1) == []
    assert valve.input_watermark_status(IDLE, 1) == []
    assert valve.input_watermark_status(IDLE, 0) == [IDLE]
    assert valve.input_watermark_status(IDLE, 0) + valve.input_watermark_status(IDLE, 1) == []
    assert valve.input_watermark_status(ACTIVE, 1) == [ACTIVE]
    assert valve.input_watermark_status(ACTIVE, 0) == []


def test_idle_inputs_are_skipped() -> None:
    """StatusWatermarkValveTest::testMultipleInputWatermarkAdvancingWithPartiallyIdleChannels and
    ::testMultipleInputWatermarkAdvancingAsChannelsIndividuallyBecomeIdle."""
    valve = StatusWatermarkValve(3)
    assert valve.input_watermark(15, 0) + valve.input_watermark(10, 1) == []
    assert valve.input_watermark_status(IDLE, 2) == [Watermark(10)]
    assert valve.input_watermark(18, 1) == [Watermark(15)]
    assert valve.input_watermark(20, 0) == [Watermark(18)]
    gradual = StatusWatermarkValve(3)
    gradual.input_watermark(25, 0), gradual.input_watermark(10, 1)
    assert gradual.input_watermark(17, 2) == [Watermark(10)]
    assert gradual.input_watermark_status(IDLE, 1) == [Watermark(17)]
    assert gradual.input_watermark_status(IDLE, 2) == [Watermark(25)]


def test_all_idle_flushes_the_max_watermark() -> None:
    """StatusWatermarkValveTest::testMultipleInputFlushMaxWatermarkAndWatermarkStatusOnceAllInputsBecomeIdle."""
    valve = StatusWatermarkValve(3)
    valve.input_watermark(10, 0), valve.input_watermark(5, 1)
    assert valve.input_watermark(3, 2) == [Watermark(3)]
    assert valve.input_watermark_status(IDLE, 0) + valve.input_watermark_status(IDLE, 1) == []
    assert valve.input_watermark_status(IDLE, 2) == [Watermark(10), IDLE]


def test_realignment_after_resume_active() -> None:
    """StatusWatermarkValveTest::testMultipleInputWatermarkRealignmentAfterResumeActive: an input
    back from idleness counts again only once it caught up with the output."""
    valve = StatusWatermarkValve(3)
    valve.input_watermark(10, 0), valve.input_watermark(7, 1)
    assert valve.input_watermark(3, 2) == [Watermark(3)]
    assert valve.input_watermark_status(IDLE, 2) == [Watermark(7)]
    assert valve.input_watermark_status(ACTIVE, 2) == []
    assert valve.input_watermark(5, 2) == []  # behind the output (7): not aligned yet
    assert valve.input_watermark(12, 1) == [Watermark(10)]  # channel 2 still does not count
    assert valve.input_watermark(11, 2) == []  # caught up (>= 10): aligned again, min is 10
    assert valve.input_watermark(15, 0) == [Watermark(11)]
