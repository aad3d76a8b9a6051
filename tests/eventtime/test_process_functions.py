"""Timers and process functions, ported from Flink's InternalTimerServiceImplTest
(flink-streaming-java/src/test/java/org/apache/flink/streaming/api/operators/) and
KeyedProcessOperatorTest (same folder), with the current Flink rule that outputs of a
processing-time timer carry no timestamp; plus side outputs, co-functions and the
non-keyed timer error of issue 30."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import (
    CoFlatMapFunction, CoMapFunction, KeyedCoProcessFunction, KeyedProcessFunction, OutputTag, ProcessFunction,
    TimeDomain, ValueStateDescriptor)
from accelflow.runtime.subtask._keygroups import KeyGroupRange, key_group_of
from accelflow.runtime.subtask._process_engine import CoProcessEngine, KeyedProcessEngine, ProcessEngine
from accelflow.runtime.subtask._timers import InternalTimerService
from evtime_harness import Harness, W


def identity(value: Any) -> Any:
    return value


def test_timer_assignment_to_key_groups() -> None:
    """InternalTimerServiceImplTest::testTimerAssignmentToKeyGroups: each timer is kept with its
    key's group."""
    timers = InternalTimerService(max_parallelism=100)
    for i in range(100):
        timers.register_event_time_timer(i, f"hello_world_{i}", 10 + i)
        timers.register_processing_time_timer(i, f"hello_world_{i}", 10 + i)
    snapshot = timers.snapshot()
    for i in range(100):
        group = snapshot[key_group_of(i, 100)]
        assert (10 + i, i, f"hello_world_{i}") in group["event"]
        assert (10 + i, i, f"hello_world_{i}") in group["processing"]
    assert sum(len(g["event"]) for g in snapshot.values()) == 100


def test_only_one_physical_processing_time_timer() -> None:
    """InternalTimerServiceImplTest::testOnlySetsOnePhysicalProcessingTimeTimer and
    ::testRegisterEarlierProcessingTimerMovesPhysicalProcessingTimer: the runner schedules one
    wake-up, at the earliest timer."""
    timers = InternalTimerService()
    for namespace, ts in [("ciao", 10), ("ciao", 20), ("ciao", 30), ("hello", 10), ("hello", 20)]:
        timers.register_processing_time_timer(1, namespace, ts)
    assert (timers.num_processing_time_timers(), timers.num_processing_time_timers("hello")) == (5, 2)
    assert timers.next_processing_time() == 10
    assert len(list(timers.advance_processing_time(10))) == 2
    assert (timers.num_processing_time_timers(), timers.next_processing_time()) == (3, 20)
    list(timers.advance_processing_time(20))
    assert (timers.num_processing_time_timers("hello"), timers.num_processing_time_timers("ciao")) == (0, 1)
    list(timers.advance_processing_time(30))
    assert timers.next_processing_time() is None
    timers.register_processing_time_timer(1, "ciao", 40)
    timers.register_processing_time_timer(1, "ciao", 35)
    assert timers.next_processing_time() == 35


def test_registering_timer_while_firing() -> None:
    """InternalTimerServiceImplTest::testRegisteringProcessingTimeTimerInOnProcessingTimeDoesNotLeakPhysicalTimers:
    a timer set while timers fire is kept (and fires in the same advance when due)."""
    timers = InternalTimerService()
    timers.register_processing_time_timer(1, "ciao", 10)
    fired = []
    for timer in timers.advance_processing_time(10):
        fired.append(timer.timestamp)
        timers.register_processing_time_timer(1, "ciao", 20)
    assert fired == [10] and timers.next_processing_time() == 20
    for timer in timers.advance_processing_time(25):
        fired.append(timer.timestamp)
        if timer.timestamp == 20:
            timers.register_processing_time_timer(1, "ciao", 22)  # already due: fires now
    assert fired == [10, 20, 22] and timers.num_processing_time_timers() == 0


def test_set_delete_and_fire_event_time_timers() -> None:
    """InternalTimerServiceImplTest::testSetAndFireEventTimeTimers and ::testDeleteEventTimeTimers:
    one timer per (key, namespace, timestamp), deleted ones never fire, in timestamp order."""
    timers = InternalTimerService()
    timers.register_event_time_timer(0, "ciao", 10)
    timers.register_event_time_timer(0, "ciao", 10)  # the same timer again
    timers.register_event_time_timer(1, "hello", 10)
    timers.register_event_time_timer(0, "ciao", 20)
    timers.register_event_time_timer(1, "hello", 30)
    timers.delete_event_time_timer(1, "hello", 30)
    assert timers.num_event_time_timers() == 3
    assert [(t.timestamp, t.key) for t in timers.advance_watermark(10)] == [(10, 0), (10, 1)]
    assert [(t.timestamp, t.key) for t in timers.advance_watermark(30)] == [(20, 0)]
    assert timers.current_watermark() == 30


def test_snapshot_and_rebalancing_restore() -> None:
    """InternalTimerServiceImplTest::testSnapshotAndRebalancingRestore: split over two subtasks,
    each takes back the timers of its key groups."""
    timers = InternalTimerService()
    keys = list(range(20))
    for key in keys:
        timers.register_event_time_timer(key, "ns", 10 + key)
    snapshot = timers.snapshot()
    halves = [InternalTimerService(), InternalTimerService()]
    halves[0].restore(snapshot, KeyGroupRange(0, 63))
    halves[1].restore(snapshot, KeyGroupRange(64, 127))
    fired = [[t.key for t in half.advance_watermark(100)] for half in halves]
    assert sorted(fired[0] + fired[1]) == keys
    assert all(key_group_of(k) < 64 for k in fired[0]) and all(key_group_of(k) >= 64 for k in fired[1])


class QueryingFunction(KeyedProcessFunction):
    def __init__(self, domain: TimeDomain) -> None:
        self.domain = domain

    def process_element(self, value: Any, ctx: Any) -> Any:
        service = ctx.timer_service()
        now = service.current_watermark() if self.domain is TimeDomain.EVENT_TIME else service.current_processing_time()
        yield f"{value}TIME:{now} TS:{ctx.timestamp()}"


def test_timestamp_and_watermark_querying() -> None:
    """KeyedProcessOperatorTest::testTimestampAndWatermarkQuerying."""
    h = Harness(KeyedProcessEngine(QueryingFunction(TimeDomain.EVENT_TIME), "query"), key=identity)
    h.watermark(17).element(5, 12).watermark(42).element(6, 13)
    assert h.output == [W(17), ("5TIME:17 TS:12", 12), W(42), ("6TIME:42 TS:13", 13)]


def test_timestamp_and_processing_time_querying() -> None:
    """KeyedProcessOperatorTest::testTimestampAndProcessingTimeQuerying."""
    h = Harness(KeyedProcessEngine(QueryingFunction(TimeDomain.PROCESSING_TIME), "query"), key=identity)
    h.processing_time(17).element(5).processing_time(42).element(6)
    assert h.output == [("5TIME:17 TS:None", None), ("6TIME:42 TS:None", None)]


class TriggeringFunction(KeyedProcessFunction):
    def __init__(self, domain: TimeDomain) -> None:
        self.domain = domain

    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value
        service = ctx.timer_service()
        if self.domain is TimeDomain.EVENT_TIME:
            service.register_event_time_timer(service.current_watermark() + 5)
        else:
            service.register_processing_time_timer(service.current_processing_time() + 5)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        assert ctx.time_domain() is self.domain
        yield 1777


def test_event_time_timers() -> None:
    """KeyedProcessOperatorTest::testEventTimeTimers."""
    h = Harness(KeyedProcessEngine(TriggeringFunction(TimeDomain.EVENT_TIME), "timers"), key=identity)
    h.watermark(0).element(17, 42).watermark(5)
    assert h.output == [W(0), (17, 42), (1777, 5), W(5)]


def test_processing_time_timers() -> None:
    """KeyedProcessOperatorTest::testProcessingTimeTimers."""
    h = Harness(KeyedProcessEngine(TriggeringFunction(TimeDomain.PROCESSING_TIME), "timers"), key=identity)
    h.element(17).processing_time(5)
    assert h.output == [(17, None), (1777, None)]


class StatefulFunction(KeyedProcessFunction):
    state = ValueStateDescriptor("seen-element")

    def __init__(self, domain: TimeDomain) -> None:
        self.domain = domain

    def open(self, runtime_context: Any) -> None:
        self.seen = runtime_context.get_state(self.state)

    def process_element(self, value: Any, ctx: Any) -> Any:
        yield f"INPUT:{value}"
        self.seen.update(value)
        service = ctx.timer_service()
        if self.domain is TimeDomain.EVENT_TIME:
            service.register_event_time_timer(service.current_watermark() + 5)
        else:
            service.register_processing_time_timer(service.current_processing_time() + 5)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield f"STATE:{self.seen.value()}"


def test_event_time_timer_with_state() -> None:
    """KeyedProcessOperatorTest::testEventTimeTimerWithState: no leakage between keys."""
    h = Harness(KeyedProcessEngine(StatefulFunction(TimeDomain.EVENT_TIME), "state"), key=identity)
    h.watermark(1).element(17, 0).watermark(2).element(42, 1).watermark(6).watermark(7)
    assert h.output == [W(1), ("INPUT:17", 0), W(2), ("INPUT:42", 1), ("STATE:17", 6), W(6), ("STATE:42", 7), W(7)]


def test_processing_time_timer_with_state() -> None:
    """KeyedProcessOperatorTest::testProcessingTimeTimerWithState."""
    h = Harness(KeyedProcessEngine(StatefulFunction(TimeDomain.PROCESSING_TIME), "state"), key=identity)
    h.processing_time(1).element(17).processing_time(2).element(42).processing_time(6).processing_time(7)
    assert h.output == [("INPUT:17", None), ("INPUT:42", None), ("STATE:17", None), ("STATE:42", None)]


class BothTriggering(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.timer_service().register_processing_time_timer(5)
        ctx.timer_service().register_event_time_timer(6)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield "EVENT:1777" if ctx.time_domain() is TimeDomain.EVENT_TIME else "PROC:1777"


def test_snapshot_and_restore() -> None:
    """KeyedProcessOperatorTest::testSnapshotAndRestore: timers survive a checkpoint."""
    h = Harness(KeyedProcessEngine(BothTriggering, "both"), key=identity)
    h.element(5, 12)
    h = h.restored(lambda: KeyedProcessEngine(BothTriggering, "both"))
    h.processing_time(5).watermark(6)
    assert h.output == [("PROC:1777", None), ("EVENT:1777", 6), W(6)]


class SideOutputs(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.output(OutputTag("int-out"), value)
        ctx.output(OutputTag("str-out"), f"IN:{value}")
        yield value


def test_side_output() -> None:
    """KeyedProcessOperatorTest::testSideOutput: ``ctx.output(tag, value)`` with the element's timestamp."""
    h = Harness(KeyedProcessEngine(SideOutputs(), "side"), key=identity)
    h.element(42, 17)
    assert h.output == [(42, 17)]
    assert h.side == {"int-out": [(42, 17)], "str-out": [("IN:42", 17)]}


class TimerOnNonKeyed(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(10)
        yield value


def test_timer_in_non_keyed_function_names_the_operator() -> None:
    """ProcessOperatorTest / issue 30: "Setting timers is only supported on a keyed streams."."""
    engine = ProcessEngine(TimerOnNonKeyed(), "enrich")
    with pytest.raises(JobError, match=r"operator 'enrich': Setting timers is only supported on a keyed streams\."):
        engine.process_element(1, 5)
    with pytest.raises(JobError, match="operator 'enrich': Keyed state can only be used on a 'keyed stream'"):
        engine.context.get_state(ValueStateDescriptor("x"))


def test_co_map_and_co_flat_map() -> None:
    """CoStreamMapTest / CoStreamFlatMapTest: each input its own method, timestamps kept."""
    class Both(CoMapFunction):
        def map1(self, value: Any) -> Any:
            return f"a{value}"

        def map2(self, value: Any) -> Any:
            return f"b{value}"

    class Split(CoFlatMapFunction):
        def flat_map1(self, value: Any) -> Any:
            return list(value)

        def flat_map2(self, value: Any) -> Any:
            yield value * 2

    mapped = CoProcessEngine(Both(), "co-map", keyed=False)
    assert mapped.process_element1(1, 3).records + mapped.process_element2(2, 4).records == [("a1", 3), ("b2", 4)]
    flat = CoProcessEngine(Split(), "co-flat-map", keyed=False)
    assert flat.process_element(("x", "y"), 1).records + flat.process_element(3, 2, input_index=1).records == [
        ("x", 1), ("y", 1), (6, 2)]


class Enrich(KeyedCoProcessFunction):
    """Keeps the latest profile per key (input 2) and joins it onto events (input 1)."""

    def open(self, runtime_context: Any) -> None:
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))

    def process_element1(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        yield (value, self.profile.value())

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.profile.update(value)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ("expired", ctx.get_current_key(), timestamp)


def test_keyed_co_process_function_shares_state_and_timers() -> None:
    """KeyedCoProcessOperatorTest::testEventTimeTimers-like: both inputs see one key's state."""
    engine = CoProcessEngine(Enrich(), "enrich", keyed=True)
    engine.open()
    engine.process_element2({"tier": "gold"}, 1, key="u1")
    assert engine.process_element1("click", 5, key="u1").records == [(("click", {"tier": "gold"}), 5)]
    assert engine.process_element1("view", 6, key="u2").records == [(("view", None), 6)]
    assert engine.advance_watermark(15).records == [(("expired", "u1", 15), 15)]


def test_function_returning_a_single_value_is_a_clear_error() -> None:
    """PyFlink's process functions yield (or return an iterable of) their outputs."""
    class ReturnsInt(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            return 5

    with pytest.raises(JobError, match="must return or yield its outputs .* got int 5"):
        KeyedProcessEngine(ReturnsInt(), "bad").process_element(1, 1, key=1)
