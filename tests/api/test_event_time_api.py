"""The event-time API as a graph (no cluster): bad input is refused when the job is built,
naming the operator or argument; two-input operators, unions and side-output edges chain as
in Flink."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from accelflow import (
    AsyncDataStream, CoMapFunction, ConfigError, Environment, OutputTag, ProcessFunction, Time,
    TumblingEventTimeWindows, WatermarkStrategy,
)
from accelflow.dataflow import build_job_graph


def chains(env: Environment) -> list[list[str]]:
    graph = build_job_graph("t", list(env._transformations))
    return [[n.name for n in c.nodes] for c in graph.chains]


class Tag(CoMapFunction):
    def map1(self, value: Any) -> Any:
        return value

    def map2(self, value: Any) -> Any:
        return value


async def echo(value: Any) -> list[Any]:
    return [value]


class Late(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value


@pytest.mark.parametrize(("build", "key", "says"), [
    (lambda env: TumblingEventTimeWindows.of(timedelta(microseconds=500)),
     "TumblingEventTimeWindows.of(size)", "must be at least 1 ms, got 0 ms"),
    (lambda env: env.from_elements(1).key_by(abs).window(TumblingEventTimeWindows.of(Time.seconds(1)))
     .allowed_lateness(-5).reduce(max), "allowed_lateness of operator 'window'", "must be at least 0 ms, got -5 ms"),
    (lambda env: env.from_elements(1).key_by(abs).window("1 minute").reduce(max), "operator 'window'",
     "window(...) needs a WindowAssigner"),
    (lambda env: env.from_elements(1).connect([1, 2]), "connect()", "connect needs a DataStream, got list"),
    (lambda env: env.from_elements(1).connect(Environment().from_elements(2)), "connect()",
     "the streams belong to different Environments"),
    (lambda env: env.from_elements(1).connect(env.from_elements(2)).map(abs), "operator 'co_map'",
     "connect(...) needs a CoMapFunction, CoFlatMapFunction or (Keyed)CoProcessFunction, got builtin_function"),
    (lambda env: env.from_elements(1).interval_join(env.from_elements(2)), "operator 'elements'",
     "interval_join joins keyed streams: a.key_by(key).interval_join(b.key_by(key))"),
    (lambda env: env.from_elements(1).key_by(abs).interval_join(env.from_elements(2)),
     "interval_join of operator 'elements'", "pass other.key_by(key), not the stream itself"),
    (lambda env: env.from_elements(1).key_by(abs).interval_join(env.from_elements(2).key_by(abs))
     .between(timedelta(seconds=1), timedelta(seconds=-1)).process(Late()), "operator 'interval_join'",
     "needs lower_bound <= upper_bound, got [1000, -1000] ms"),
    (lambda env: env.from_elements(1).assign_timestamps_and_watermarks(lambda v, ts: v), "operator 'timestamps_watermarks'",
     "assign_timestamps_and_watermarks needs a WatermarkStrategy"),
    (lambda env: WatermarkStrategy.for_bounded_out_of_orderness(-1), "WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness)",
     "must be at least 0 ms"),
    (lambda env: AsyncDataStream.ordered_wait(env.from_elements(1), echo, 0), "timeout of operator 'async_wait'",
     "must be at least 1 ms, got 0 ms"),
    (lambda env: AsyncDataStream.unordered_wait(env.from_elements(1), echo, 10, capacity=0),
     "operator 'async_unordered_wait'", "capacity must be a positive integer (inputs in flight), got 0"),
    (lambda env: env.from_elements(1).process(abs), "operator 'process'", "process(...) needs a ProcessFunction"),
    (lambda env: env.from_elements(1).key_by(abs).process(abs), "operator 'process'",
     "process(...) needs a KeyedProcessFunction"),
    (lambda env: env.from_elements(1).get_side_output("late"), "operator 'elements'",
     "get_side_output needs an OutputTag, got str"),
    (lambda env: env.from_elements(1).key_by(abs).set_parallelism(2), "operator 'elements'",
     "set_parallelism() sets an operator's own setting"),
])
def test_bad_input_is_refused_when_the_job_is_built(build: Any, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(Environment())
    assert caught.value.keys == (key,)
    assert says in str(caught.value)


def test_a_keyed_co_process_function_needs_both_inputs_keyed() -> None:
    from accelflow import KeyedCoProcessFunction

    class Both(KeyedCoProcessFunction):
        def process_element1(self, value: Any, ctx: Any) -> Any:
            return None

        def process_element2(self, value: Any, ctx: Any) -> Any:
            return None

    env = Environment()
    with pytest.raises(ConfigError, match=r"needs both inputs keyed: a.connect\(b\).key_by\(key1, key2\)"):
        env.from_elements(1).connect(env.from_elements(2)).process(Both())


def test_two_input_operators_and_unions_start_a_chain_and_what_follows_chains_to_them() -> None:
    env = Environment()
    a, b = env.from_elements(1, name="a"), env.from_elements(2, name="b")
    a.connect(b).map(Tag(), name="co").map(abs, name="after").print()
    a2, b2 = env.from_elements(1, name="a2"), env.from_elements(2, name="b2")
    a2.union(b2).map(abs, name="after-union").print()
    assert chains(env) == [["a"], ["b"], ["co", "after", "print"], ["a2"], ["b2"], ["union", "after-union", "print-2"]]


def test_a_side_output_edge_leaves_the_main_chain_alone() -> None:
    env = Environment()
    main = env.from_elements(1, name="src").process(Late(), name="split")
    main.map(abs, name="main-map").print()
    main.get_side_output(OutputTag("late")).print(name="late-print")
    graph = build_job_graph("t", list(env._transformations))
    assert [[n.name for n in c.nodes] for c in graph.chains] == [["src", "split", "main-map", "print"], ["late-print"]]
    late = graph.chains[1].inputs[0]
    assert (late.chain, late.node, late.edge.side) == (0, 1, "late")


def test_window_all_runs_in_one_subtask() -> None:
    env = Environment({"parallelism.default": 4})
    env.from_sequence(1, 9).window_all(TumblingEventTimeWindows.of(Time.seconds(1))).reduce(max).print()
    window = next(t for t in env._transformations if t.kind == "window")
    assert window.parallelism == 1 and window.spec.all_window
    with pytest.raises(ConfigError, match="window_all runs in one subtask, got parallelism=2"):
        env.from_sequence(1, 9).window_all(TumblingEventTimeWindows.of(Time.seconds(1))).reduce(max, parallelism=2)


def test_broadcast_without_descriptors_still_partitions() -> None:
    env = Environment({"parallelism.default": 2})
    assert sorted(env.from_elements(1, 2).broadcast().map(lambda v: v, parallelism=2).execute_and_collect()) == [1, 1, 2, 2]
