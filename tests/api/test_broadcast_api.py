"""The broadcast state pattern as a graph (no cluster): bad input is refused when the job is
built, naming the operator and the fix; a keyed stream needs a KeyedBroadcastProcessFunction,
a non-keyed one a BroadcastProcessFunction, as PyFlink checks."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow import (
    BroadcastConnectedStream, BroadcastProcessFunction, BroadcastStream, ConfigError, Environment,
    KeyedBroadcastProcessFunction, MapStateDescriptor, Types, ValueStateDescriptor,
)

RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class Plain(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return None

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        return None


class Keyed(KeyedBroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return None

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        return None


@pytest.mark.parametrize(("build", "key", "says"), [
    (lambda env: env.from_elements(1).broadcast(ValueStateDescriptor("rules")), "broadcast() of operator 'elements'",
     "broadcast state is map state: broadcast() takes MapStateDescriptors, got ValueStateDescriptor"),
    (lambda env: env.from_elements(1).broadcast(RULES, MapStateDescriptor("rules")),
     "broadcast() of operator 'elements'", "broadcast state 'rules' is declared twice"),
    (lambda env: env.from_elements(1).connect(env.from_elements(2).broadcast(RULES)).process(Keyed()),
     "operator 'broadcast_process'", "a non-keyed stream connected to a broadcast stream needs a "
     "BroadcastProcessFunction (process_element and process_broadcast_element), got Keyed"),
    (lambda env: env.from_elements(1).key_by(abs).connect(env.from_elements(2).broadcast(RULES))
     .process(Plain(), name="rules"), "operator 'rules'",
     "a keyed stream connected to a broadcast stream needs a KeyedBroadcastProcessFunction"),
    (lambda env: env.from_elements(1).connect(env.from_elements(2).broadcast(RULES)).process(abs),
     "operator 'broadcast_process'", "needs a BroadcastProcessFunction"),
    (lambda env: env.from_elements(1).connect(Environment().from_elements(2).broadcast(RULES)), "connect()",
     "the streams belong to different Environments"),
])
def test_bad_input_is_refused_naming_the_operator(build: Any, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(Environment())
    assert says in str(caught.value)
    assert caught.value.keys == (key,)


def test_the_streams_are_pyflinks() -> None:
    env = Environment({"parallelism.default": 2})
    rules = env.from_elements(("a", 1)).broadcast(RULES)
    assert isinstance(rules, BroadcastStream)
    connected = env.from_elements(1).key_by(abs).connect(rules)
    assert isinstance(connected, BroadcastConnectedStream)
    out = connected.process(Keyed, name="rules")
    node = env._transformations[out._id]
    assert node.spec.keyed and node.spec.descriptors == (RULES,)
    assert [e.partitioning for e in node.inputs] == ["hash", "broadcast"]
    assert env.from_elements(1).broadcast().map(abs)._operator.inputs[0].partitioning == "broadcast"
