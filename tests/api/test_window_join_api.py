"""The window join and co-group as a graph (no cluster): bad input is refused when the job is
built, naming the operator or the builder step and the fix; the job is Flink's (a tagging map
per input, a union, a keyed window)."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow import (
    CoGroupedStreams, ConfigError, Environment, JoinedStreams, Time, TumblingEventTimeWindows, Types,
)
from accelflow.dataflow import build_job_graph

WINDOW = TumblingEventTimeWindows.of(Time.seconds(1))


def first(value: Any) -> Any:
    return value[0]


def pair(a: Any, b: Any) -> Any:
    return (a, b)


def two(env: Environment) -> tuple[Any, Any]:
    return env.from_elements((1, "a")), env.from_elements((1, "b"))


@pytest.mark.parametrize(("build", "key", "says"), [
    (lambda a, b: a.join(b).apply(pair), "join(...).apply()",
     "join: apply() comes after where(key_selector).equal_to(key_selector).window(assigner), as in PyFlink: "
     "a.join(b).where(key_a).equal_to(key_b).window(assigner).apply(function)"),
    (lambda a, b: a.co_group(b).window(WINDOW), "co_group(...).window()",
     "co_group: window() comes after where(key_selector).equal_to(key_selector)"),
    (lambda a, b: a.join(b).equal_to(first), "join(...).equal_to()", "equal_to() comes after where(key_selector)"),
    (lambda a, b: a.join(b).where(first).window(WINDOW), "join(...).window()",
     "window() comes after equal_to(key_selector)"),
    (lambda a, b: a.join(b).where(first).apply(pair), "join(...).apply()",
     "apply() comes after equal_to(key_selector).window(assigner)"),
    (lambda a, b: a.join(b).where(first).equal_to(first).apply(pair), "join(...).apply()",
     "apply() comes after window(assigner)"),
    (lambda a, b: a.join(b).where(0), "join(...).where()",
     "needs a key selector (a function of a record, or a KeySelector), got int (0)"),
    (lambda a, b: a.co_group(b).where(first).equal_to("id"), "co_group(...).equal_to()",
     "needs a key selector (a function of a record, or a KeySelector), got str ('id')"),
    (lambda a, b: a.join(b).where(first).equal_to(first).window("1 minute"), "join(...).window()",
     "window() needs a WindowAssigner (e.g. TumblingEventTimeWindows.of(Time.seconds(5))), got str ('1 minute')"),
    (lambda a, b: a.join(b).where(first).equal_to(first).window(WINDOW).apply(None), "operator 'join'",
     "apply() needs a JoinFunction (an object with join() or a function), got NoneType (None)"),
    (lambda a, b: a.co_group(b).where(first).equal_to(first).window(WINDOW).apply(3, name="groups"),
     "operator 'groups'", "apply() needs a CoGroupFunction (an object with co_group() or a function), got int (3)"),
    (lambda a, b: a.join(b).where(first, Types.INT()).equal_to(first, Types.STRING()), "join(...).equal_to()",
     "the key types of the two inputs differ"),
    (lambda a, b: a.join(b).where(first).equal_to(first).window(WINDOW).allowed_lateness(-5).apply(pair),
     "allowed_lateness of operator 'join'", "must be at least 0 ms, got -5 ms"),
    (lambda a, b: a.join(b).where(first).equal_to(first).window(WINDOW).evictor(object()), "join(...).evictor()",
     "evictors are not supported yet"),
    (lambda a, b: a.join([1, 2]), "join()", "join needs a DataStream, got list"),
    (lambda a, b: a.co_group(Environment().from_elements(2)), "co_group()",
     "the streams belong to different Environments"),
])
def test_bad_input_is_refused_naming_the_operator(build: Any, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(*two(Environment()))
    assert says in str(caught.value)
    assert caught.value.keys == (key,)


def test_the_builders_are_pyflinks() -> None:
    a, b = two(Environment())
    assert isinstance(a.join(b), JoinedStreams) and isinstance(a.co_group(b), CoGroupedStreams)


def test_a_join_is_a_tagging_map_per_input_a_union_and_a_keyed_window() -> None:
    env = Environment({"parallelism.default": 2})
    a, b = two(env)
    a.join(b).where(first).equal_to(first).window(WINDOW).apply(pair, name="pairs").print()
    graph = build_job_graph("t", list(env._transformations))
    names = [[n.name for n in c.nodes] for c in graph.chains]
    assert names == [["elements", "pairs input 1"], ["elements-2", "pairs input 2"], ["union"], ["pairs", "print"]]
    window = next(t for t in env._transformations if t.name == "pairs")
    assert window.kind == "window" and window.inputs[0].partitioning == "hash"
