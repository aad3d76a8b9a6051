"""Process functions, keyed state, side outputs, two-input operators (union, connect, interval
join) and the rolling aggregations as real jobs on the local cluster, at parallelism 1 and 2
(Flink's and PyFlink's scenarios: the source test is named in each)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from event_jobs import MONOTONOUS, Alert, CountPerKey, PairUp

from accelflow import (
    CoFlatMapFunction, CoMapFunction, ConfigError, Environment, JobError, KeyedCoProcessFunction,
    KeyedProcessFunction, OutputTag, ProcessFunction, Types, ValueStateDescriptor, ListStateDescriptor,
    WatermarkStrategy,
)

PARALLELISM = pytest.mark.parametrize("p", [1, 2])


def env_of(p: int) -> Environment:
    return Environment({"parallelism.default": p})


def collected(stream: Any) -> list[Any]:
    """The stream's records, sorted (by their repr where they do not compare)."""
    records = stream.execute_and_collect()
    try:
        return sorted(records)
    except TypeError:
        return sorted(records, key=repr)


@PARALLELISM
def test_keyed_process_function_with_state_and_event_time_timers(p: int) -> None:
    """KeyedProcessOperatorTest#testEventTimeTimerWithState: state read in on_timer, the timer
    fired by the watermark (here the end of the bounded input)."""
    data = [("a", 1), ("a", 50), ("b", 60), ("a", 300), ("c", 5)]
    stream = env_of(p).from_collection(data).assign_timestamps_and_watermarks(MONOTONOUS) \
        .key_by(lambda x: x[0]).process(Alert())
    assert collected(stream) == [("a", 101, 3), ("b", 160, 1), ("c", 105, 1)]


class Split(ProcessFunction):
    """PyFlink's side output example: evens to the main output, odds to ``odd``."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value % 2:
            ctx.output(OutputTag("odd"), value)
        else:
            yield value


@PARALLELISM
def test_side_outputs_of_a_process_function_reach_their_own_stream(p: int) -> None:
    """test_data_stream.py::DataStreamTests::test_process_side_output."""
    main = env_of(p).from_sequence(1, 10).process(Split())
    odd = main.get_side_output(OutputTag("odd", Types.INT())).map(lambda x: ("odd", x))
    evens = main.map(lambda x: ("even", x))
    assert collected(evens.union(odd)) == [("even", x) for x in (2, 4, 6, 8, 10)] + [("odd", x) for x in (1, 3, 5, 7, 9)]


class Stamps(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value, ctx.timestamp()


@PARALLELISM
def test_timestamps_survive_map_filter_flat_map_and_a_rebalance(p: int) -> None:
    """Flink's StreamRecord timestamps: map/filter/flat_map outputs keep their record's."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v * 1000)
    stream = env_of(p).from_sequence(1, 6, parallelism=1).assign_timestamps_and_watermarks(strategy) \
        .filter(lambda v: v != 3).flat_map(lambda v: [v, v]).rebalance().map(lambda v: v + 100).process(Stamps())
    assert collected(stream) == [(v + 100, v * 1000) for v in (1, 1, 2, 2, 4, 4, 5, 5, 6, 6)]


@PARALLELISM
def test_keyed_rich_map_gets_its_keys_own_state(p: int) -> None:
    """A RichMapFunction after key_by: ``ctx.get_state`` is the current record's key's."""
    stream = env_of(p).from_collection(["x", "y", "x", "x", "y"]).key_by(lambda v: v).map(CountPerKey())
    assert collected(stream) == [("x", 1), ("x", 2), ("x", 3), ("y", 1), ("y", 2)]


class StatefulFunction(KeyedProcessFunction):
    """test_data_stream.py::DataStreamTests::test_keyed_process_function_with_state (its
    list state variant): every value of the key so far."""

    def open(self, runtime_context: Any) -> None:
        self.values = runtime_context.get_list_state(ListStateDescriptor("values", Types.INT()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.values.add(value[1])
        yield ctx.get_current_key(), sorted(self.values.get())


@PARALLELISM
def test_list_state_of_a_keyed_process_function(p: int) -> None:
    data = [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]
    stream = env_of(p).from_collection(data).key_by(lambda x: x[0]).process(StatefulFunction())
    assert collected(stream) == [("a", [1]), ("a", [1, 3]), ("a", [1, 3, 5]), ("b", [2]), ("b", [2, 4])]


class Tag(CoMapFunction):
    def map1(self, value: Any) -> Any:
        return "left", value

    def map2(self, value: Any) -> Any:
        return "right", value


class Twice(CoFlatMapFunction):
    def flat_map1(self, value: Any) -> Any:
        return [value, value]

    def flat_map2(self, value: Any) -> Any:
        yield -value


@PARALLELISM
def test_connect_with_co_map_and_co_flat_map(p: int) -> None:
    """test_data_stream.py::DataStreamTests::test_co_map_function_without_data_types and
    test_co_flat_map_function_without_data_types."""
    env = env_of(p)
    numbers, words = env.from_elements(1, 2, 3), env.from_elements("a", "b")
    assert collected(numbers.connect(words).map(Tag())) == [
        ("left", 1), ("left", 2), ("left", 3), ("right", "a"), ("right", "b")]
    env = env_of(p)
    assert collected(env.from_elements(1, 2).connect(env.from_elements(5)).flat_map(Twice())) == [-5, 1, 1, 2, 2]


class Join(KeyedCoProcessFunction):
    """The key's first-input value, looked up by its second input: state shared by both."""

    def open(self, runtime_context: Any) -> None:
        self.price = runtime_context.get_state(ValueStateDescriptor("price", Types.INT()))

    def process_element1(self, value: Any, ctx: Any) -> Any:
        self.price.update(value[1])

    def process_element2(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(value[1])

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.get_current_key(), self.price.value()


@PARALLELISM
def test_keyed_co_process_function_shares_state_and_timers_across_inputs(p: int) -> None:
    """KeyedCoProcessOperatorTest#testEventTimeTimers (state of the first input read on the
    second's timer, fired by the end of both inputs)."""
    env = env_of(p)
    prices = env.from_collection([("apple", 3), ("pear", 5)]).assign_timestamps_and_watermarks(MONOTONOUS)
    asks = env.from_collection([("apple", 10), ("pear", 20)]).assign_timestamps_and_watermarks(MONOTONOUS)
    stream = prices.connect(asks).key_by(lambda x: x[0], lambda x: x[0]).process(Join())
    assert collected(stream) == [("apple", 3), ("pear", 5)]


@PARALLELISM
def test_interval_join_pairs_records_within_the_bounds(p: int) -> None:
    """IntervalJoinOperatorTest#testNegativeInclusiveAndNegativeExclusive-style bounds through the
    API: left at t pairs with right in [t - 2, t + 5), a pair at the later time."""
    env = env_of(p)
    left = env.from_collection([("k", 10), ("k", 20), ("j", 30)]).assign_timestamps_and_watermarks(MONOTONOUS)
    right = env.from_collection([("k", 8), ("k", 11), ("k", 25), ("k", 40), ("j", 31)]) \
        .assign_timestamps_and_watermarks(MONOTONOUS)
    stream = left.key_by(lambda x: x[0]).interval_join(right.key_by(lambda x: x[0])) \
        .between(timedelta(milliseconds=-2), timedelta(milliseconds=5)).upper_bound_exclusive().process(PairUp())
    assert collected(stream) == [("j", 30, 31, 31), ("k", 10, 8, 10), ("k", 10, 11, 11)]


@PARALLELISM
def test_union_of_three_streams_of_different_parallelism(p: int) -> None:
    """test_data_stream.py::DataStreamTests::test_union_stream."""
    env = env_of(p)
    a = env.from_sequence(1, 3, parallelism=1)
    b = env.from_sequence(10, 12, parallelism=2)
    c = env.from_elements(100)
    assert collected(a.union(b, c).map(lambda x: x * 2)) == [2, 4, 6, 20, 22, 24, 200]


@pytest.mark.parametrize(("how", "expected"), [
    ("min", [("a", 1, "first"), ("b", 5, "b")]),       # the field's minimum, the first record's other fields
    ("max", [("a", 3, "first"), ("b", 5, "b")]),
    ("min_by", [("a", 1, "second"), ("b", 5, "b")]),    # the whole record with the minimum
    ("max_by", [("a", 3, "first"), ("b", 5, "b")]),    # the first of equals
])
def test_min_max_min_by_max_by_as_flink(how: str, expected: list[Any]) -> None:
    """test_data_stream.py::DataStreamTests::test_min_by / max_by / min / max (batch mode:
    one final value per key)."""
    data = [("a", 3, "first"), ("a", 1, "second"), ("a", 3, "third"), ("b", 5, "b")]
    env = Environment({"parallelism.default": 2, "execution.runtime-mode": "batch"})
    stream = getattr(env.from_collection(data).key_by(lambda x: x[0]), how)(1)
    assert collected(stream) == expected


def test_rolling_min_in_streaming_mode_emits_every_running_value() -> None:
    env = Environment({"execution.runtime-mode": "streaming"})
    data = [("a", 3, "first"), ("a", 1, "second"), ("a", 2, "third")]
    assert env.from_collection(data).key_by(lambda x: x[0]).min(1).execute_and_collect() == [
        ("a", 3, "first"), ("a", 1, "first"), ("a", 1, "first")]


@PARALLELISM
def test_every_partitioner_delivers_every_record(p: int) -> None:
    """shuffle, rescale, broadcast (one copy per subtask) and partition_custom."""
    stream = env_of(p).from_sequence(1, 6).shuffle().map(lambda x: x).rescale().map(lambda x: x) \
        .partition_custom(lambda key, n: key % n, lambda x: x).map(lambda x: x).broadcast().map(lambda x: x)
    assert collected(stream) == sorted(list(range(1, 7)) * p)


def test_partition_custom_sends_each_key_where_the_partitioner_says() -> None:
    from accelflow import RuntimeContext, RichMapFunction

    class Where(RichMapFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.index = ctx.index_of_this_subtask

        def map(self, value: Any) -> Any:
            return value, self.index

    stream = env_of(3).from_sequence(0, 8).partition_custom(lambda key, n: key % n, lambda x: x).map(Where())
    assert all(index == value % 3 for value, index in stream.execute_and_collect())


def test_fluent_name_uid_and_parallelism_set_the_operator() -> None:
    env = env_of(1)
    stream = env.from_sequence(1, 4).map(lambda x: x * 2).name("double").uid("double-v1").set_parallelism(2)
    stream.print()
    graph = env._job_graph("fluent")
    double = next(t for t in graph.transformations if t.name == "double")
    assert (double.uid, double.parallelism, double.state_name) == ("double-v1", 2, "double-v1")


def test_a_uid_used_twice_names_both_operators() -> None:
    env = env_of(1)
    env.from_sequence(1, 4).map(abs).uid("same")
    with pytest.raises(ConfigError, match="uid 'same' is taken by operator 'map'"):
        env.from_sequence(1, 4).map(abs).uid("same")


class NonKeyedTimer(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(10)


class NonKeyedState(CoMapFunction):
    def open(self, runtime_context: Any) -> None:
        runtime_context.get_state(ValueStateDescriptor("x", Types.INT()))

    def map1(self, value: Any) -> Any:
        return value

    def map2(self, value: Any) -> Any:
        return value


class TwoKinds(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        runtime_context.get_state(ValueStateDescriptor("seen", Types.INT()))
        runtime_context.get_list_state(ListStateDescriptor("seen", Types.INT()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        return None


def test_bad_inputs_at_run_time_name_the_operator() -> None:
    """A timestamp assigner returning None or a str, a timer in a non-keyed function, keyed
    state on a non-keyed stream, a state name reused with another type."""
    bad = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: None)
    env = env_of(1)
    env.from_elements(1).assign_timestamps_and_watermarks(bad, name="stamps").print()
    with pytest.raises(JobError, match=r"operator 'stamps': the timestamp assigner .* returned NoneType None"):
        env.execute()
    text = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: "12:00")
    env = env_of(1)
    env.from_elements(1).assign_timestamps_and_watermarks(text, name="stamps").print()
    with pytest.raises(JobError, match=r"operator 'stamps': .* returned str '12:00'"):
        env.execute()
    env = env_of(1)
    env.from_elements(1).process(NonKeyedTimer(), name="timers").print()
    with pytest.raises(JobError, match="operator 'timers': Setting timers is only supported on a keyed"):
        env.execute()
    env = env_of(1)
    env.from_elements(1).connect(env.from_elements(2)).map(NonKeyedState(), name="lookup").print()
    with pytest.raises(JobError, match="operator 'lookup': Keyed state can only be used on a 'keyed stream'"):
        env.execute()
    env = env_of(1)
    env.from_elements(1).key_by(abs).process(TwoKinds(), name="kinds").print()
    with pytest.raises(JobError, match="operator 'kinds': state name 'seen' is used by a value state and a list"):
        env.execute()
