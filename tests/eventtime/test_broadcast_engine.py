"""The broadcast state operator's engine, driven directly (as Flink's
CoBroadcastWithKeyedOperatorTest drives its operator): ``apply_to_keyed_state`` reaches
every key's state, timers fire with read-only broadcast state, and a snapshot's copy of the
broadcast state goes to every subtask of any new parallelism."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import (
    KeyedBroadcastProcessFunction, MapStateDescriptor, ValueStateDescriptor,
)
from accelflow.runtime.subtask._broadcast import BroadcastEngine, BroadcastStates

RULES = MapStateDescriptor("rules")
COUNT = ValueStateDescriptor("count")


class Scale(KeyedBroadcastProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(100)

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put("factor", value)
        ctx.apply_to_keyed_state(COUNT, lambda key, state: state.update(state.value() * value))

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        rules = ctx.get_broadcast_state(RULES)
        yield ctx.get_current_key(), self.count.value(), rules.get("factor")
        rules.put("factor", 0)


def engine() -> BroadcastEngine:
    e = BroadcastEngine(Scale(), "scale", (RULES,), keyed=True)
    e.open()
    return e


def test_apply_to_keyed_state_reaches_every_key_and_timers_see_the_broadcast_state_read_only() -> None:
    e = engine()
    for key in ("a", "b", "a"):
        e.process_element(key, 1, key=key, input_index=0)
    assert e.process_element(10, 2, input_index=1).records == []
    with pytest.raises(JobError, match="operator 'scale': broadcast state 'rules' is read-only here \\(put\\)"):
        e.advance_watermark(100)


def test_counts_after_apply_to_keyed_state() -> None:
    e = engine()
    for key in ("a", "b", "a"):
        e.process_element(key, 1, key=key, input_index=0)
    e.process_element(10, 2, input_index=1)
    e.set_current_key("a")
    assert e.backend is not None and e.backend.get_state(COUNT).value() == 20
    e.set_current_key("b")
    assert e.backend.get_state(COUNT).value() == 10


def test_every_subtask_of_a_new_parallelism_gets_a_copy() -> None:
    old = [BroadcastStates("op", (RULES,)) for _ in range(2)]
    for states in old:
        states.writable(RULES).put("factor", 3)
    snapshots = [s.snapshot() for s in old]
    for index in range(3):
        new = BroadcastStates("op", (RULES, MapStateDescriptor("more")))
        new.restore(snapshots, index)
        assert new.read_only(RULES).items() == [("factor", 3)] and new.read_only("more").is_empty()


def test_a_rollback_in_place_empties_the_broadcast_state_before_restoring() -> None:
    """Issue 28: survivors reset then restore; a rule broadcast after the checkpoint is gone."""
    e = engine()
    e.process_element(10, 2, input_index=1)
    e.reset()
    e.broadcast.restore([], 0)  # rolled back to before any checkpoint: nothing to restore
    assert e.broadcast.read_only(RULES).is_empty()
