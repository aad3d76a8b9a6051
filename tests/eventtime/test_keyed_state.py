"""Keyed state and its time-to-live, ported from Flink's TtlStateTestBase with
TtlValueStateTestContext (flink-runtime/src/test/java/org/apache/flink/runtime/state/ttl/):
TTL 100 ms, values "5" (update on empty), "10" (unexpired) and "15" (expired), a manual
clock, and a snapshot taken and restored between steps as the base test does. Plus PyFlink's
state methods and the descriptor-name conflict of issue 30."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import (
    AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
    StateTtlConfig, ValueStateDescriptor)
from accelflow.runtime.subtask._keyed_state import KeyedStateBackend
from accelflow.runtime.subtask._keygroups import KeyGroupRange

TTL = 100
UPDATE_EMPTY, UPDATE_UNEXPIRED, UPDATE_EXPIRED = "5", "10", "15"
OnCreateAndWrite = StateTtlConfig.UpdateType.OnCreateAndWrite
OnReadAndWrite = StateTtlConfig.UpdateType.OnReadAndWrite
NeverReturnExpired = StateTtlConfig.StateVisibility.NeverReturnExpired
ReturnExpired = StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp


class TtlValueState:
    """The TtlStateTestBase fixture: a backend with a manual clock, key "defaultKey"."""

    def __init__(self, config: StateTtlConfig) -> None:
        self.time = 0
        self.descriptor = ValueStateDescriptor("ttl-value")
        self.descriptor.enable_time_to_live(config)
        self.backend = self._backend()

    def _backend(self) -> KeyedStateBackend:
        backend = KeyedStateBackend("ttl-test", clock=lambda: self.time)
        backend.set_current_key("defaultKey")
        return backend

    @property
    def state(self) -> Any:
        return self.backend.get_state(self.descriptor)

    def take_and_restore_snapshot(self) -> None:
        snapshot = pickle.loads(pickle.dumps(self.backend.snapshot()))
        key = self.backend.current_key
        self.backend = self._backend()
        self.backend.restore(snapshot, KeyGroupRange.all())
        self.backend.set_current_key(key)

    def original_is_empty(self) -> bool:
        return not self.backend.tables.get("ttl-value")


def ttl_state(update: Any, visibility: Any, ttl: int = TTL) -> TtlValueState:
    return TtlValueState(StateTtlConfig.new_builder(ttl).set_update_type(update).set_state_visibility(visibility).build())


def test_exact_expiration_on_write() -> None:
    """TtlStateTestBase::testExactExpirationOnWrite."""
    s = ttl_state(OnCreateAndWrite, NeverReturnExpired)
    s.take_and_restore_snapshot()
    s.time = 0
    s.state.update(UPDATE_EMPTY)
    s.take_and_restore_snapshot()
    s.time = 20
    assert s.state.value() == UPDATE_EMPTY
    s.take_and_restore_snapshot()
    s.time = 50
    s.state.update(UPDATE_UNEXPIRED)
    s.take_and_restore_snapshot()
    s.time = 120
    assert s.state.value() == UPDATE_UNEXPIRED
    s.take_and_restore_snapshot()
    s.time = 170
    s.state.update(UPDATE_EXPIRED)
    s.take_and_restore_snapshot()
    s.time = 220
    assert s.state.value() == UPDATE_EXPIRED
    s.take_and_restore_snapshot()
    s.time = 300
    assert s.state.value() is None
    assert s.original_is_empty()  # cleared on access


def test_relaxed_expiration_on_write() -> None:
    """TtlStateTestBase::testRelaxedExpirationOnWrite: an expired value is returned once, then gone."""
    s = ttl_state(OnCreateAndWrite, ReturnExpired)
    s.state.update(UPDATE_EMPTY)
    s.take_and_restore_snapshot()
    s.time = 120
    assert s.state.value() == UPDATE_EMPTY
    assert s.original_is_empty()
    assert s.state.value() is None


def test_exact_expiration_on_read() -> None:
    """TtlStateTestBase::testExactExpirationOnRead: reads extend the life."""
    s = ttl_state(OnReadAndWrite, NeverReturnExpired)
    s.state.update(UPDATE_EMPTY)
    s.take_and_restore_snapshot()
    s.time = 50
    assert s.state.value() == UPDATE_EMPTY
    s.take_and_restore_snapshot()
    s.time = 120
    assert s.state.value() == UPDATE_EMPTY
    s.take_and_restore_snapshot()
    s.time = 250
    assert s.state.value() is None
    assert s.original_is_empty()


def test_relaxed_expiration_on_read() -> None:
    """TtlStateTestBase::testRelaxedExpirationOnRead."""
    s = ttl_state(OnReadAndWrite, ReturnExpired)
    s.state.update(UPDATE_EMPTY)
    s.take_and_restore_snapshot()
    s.time = 50
    assert s.state.value() == UPDATE_EMPTY
    s.take_and_restore_snapshot()
    s.time = 170
    assert s.state.value() == UPDATE_EMPTY
    assert s.state.value() is None


def test_expiration_timestamp_overflow() -> None:
    """TtlStateTestBase::testExpirationTimestampOverflow: a TTL of Long.MAX_VALUE never expires."""
    s = ttl_state(OnCreateAndWrite, NeverReturnExpired, ttl=2**63 - 1)
    s.time = 10
    s.state.update(UPDATE_EMPTY)
    s.take_and_restore_snapshot()
    s.time = 50
    assert s.state.value() == UPDATE_EMPTY


@pytest.mark.parametrize("full_snapshot_cleanup", [False, True], ids=["plain", "cleanup_full_snapshot"])
@pytest.mark.parametrize("by", ["key", "namespace"])
def test_multiple_keys_and_namespaces(by: str, full_snapshot_cleanup: bool) -> None:
    """TtlStateTestBase::testMultipleKeys, ::testMultipleNamespaces and their WithSnapshotCleanup
    variants (the clock set back after a restore sees an entry only if the snapshot kept it)."""
    builder = StateTtlConfig.new_builder(TTL)
    s = TtlValueState((builder.cleanup_full_snapshot() if full_snapshot_cleanup else builder).build())

    def switch(id_: str) -> None:
        if by == "key":
            s.backend.set_current_key(id_)
        else:
            s.state.set_current_namespace(id_)

    s.take_and_restore_snapshot()
    switch("id2")
    s.state.update(UPDATE_EMPTY)
    s.take_and_restore_snapshot()
    s.time = 50
    switch("id1")
    s.state.update(UPDATE_EMPTY)
    switch("id2")
    s.state.update(UPDATE_UNEXPIRED)
    s.time = 120
    s.take_and_restore_snapshot()
    switch("id1")
    assert s.state.value() == UPDATE_EMPTY
    switch("id2")
    assert s.state.value() == UPDATE_UNEXPIRED
    s.take_and_restore_snapshot()
    s.time = 170
    switch("id2")
    s.state.update(UPDATE_EXPIRED)
    s.time = 230
    s.take_and_restore_snapshot()
    s.time = 170 if full_snapshot_cleanup else s.time
    switch("id1")
    assert s.state.value() is None
    switch("id2")
    assert s.state.value() == UPDATE_EXPIRED
    s.time = 300
    s.take_and_restore_snapshot()
    s.time = 230 if full_snapshot_cleanup else s.time
    switch("id1")
    assert s.state.value() is None
    switch("id2")
    assert s.state.value() is None


def test_snapshot_change_restore() -> None:
    """TtlStateTestBase::testSnapshotChangeRestore: a restore brings back the snapshot's state,
    not what came after."""
    s = ttl_state(OnCreateAndWrite, NeverReturnExpired)
    s.backend.set_current_key("k1")
    s.state.update(UPDATE_EMPTY)
    s.time = 50
    s.state.update(UPDATE_UNEXPIRED)
    s.time = 100
    s.backend.set_current_key("k2")
    s.state.update(UPDATE_EMPTY)
    snapshot = pickle.dumps(s.backend.snapshot())
    s.time = 170
    s.backend.set_current_key("k1")
    s.state.update(UPDATE_EXPIRED)
    s.backend.set_current_key("k2")
    s.state.update(UPDATE_UNEXPIRED)
    s.backend = s._backend()
    s.backend.restore(pickle.loads(snapshot), KeyGroupRange.all())
    s.time = 180
    s.backend.set_current_key("k1")
    assert s.state.value() is None
    s.backend.set_current_key("k2")
    assert s.state.value() == UPDATE_EMPTY


def test_value_set_null() -> None:
    """TtlStateTestBase::testValueSetNull: ``update(None)`` clears."""
    s = ttl_state(OnCreateAndWrite, ReturnExpired)
    s.state.update(UPDATE_UNEXPIRED)
    assert s.state.value() == UPDATE_UNEXPIRED
    s.state.update(None)
    assert s.state.value() is None


def test_list_and_map_state_expire_per_entry() -> None:
    """TtlListStateTestContext / TtlMapStateAllEntriesTestContext: each element and each map
    entry has its own time to live."""
    now = [0]
    backend = KeyedStateBackend("ttl", clock=lambda: now[0])
    backend.set_current_key("k")
    config = StateTtlConfig.new_builder(100).build()
    items, entries = ListStateDescriptor("items"), MapStateDescriptor("entries")
    items.enable_time_to_live(config)
    entries.enable_time_to_live(config)
    lst, mp = backend.get_state(items), backend.get_state(entries)
    lst.add(1)
    mp.put("a", 1)
    now[0] = 60
    lst.add_all([2, 3])
    mp.put("b", 2)
    now[0] = 120
    assert lst.get() == [2, 3]
    assert mp.items() == [("b", 2)] and not mp.contains("a") and mp.get("a") is None
    now[0] = 200
    assert lst.get() == [] and mp.is_empty()


def test_incremental_cleanup_drops_expired_keys() -> None:
    """TtlStateTestBase::testIncrementalCleanupWholeState: accessing state sweeps expired entries
    of other keys."""
    now = [0]
    backend = KeyedStateBackend("ttl", clock=lambda: now[0])
    descriptor = ValueStateDescriptor("v")
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(100).cleanup_incrementally(5, True).build())
    state = backend.get_state(descriptor)
    for i in range(20):
        backend.set_current_key(i)
        state.update(i)
    now[0] = 120
    for _ in range(6):
        backend.on_record()
    assert backend.tables["v"] == {}


class Average(AggregateFunction):
    def create_accumulator(self) -> Any:
        return (0, 0)

    def add(self, value: Any, accumulator: Any) -> Any:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0] / accumulator[1]

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


def test_pyflink_state_methods() -> None:
    """PyFlink's state API (pyflink/datastream/tests/test_data_stream.py::test_keyed_process_function_with_state
    style): value, list, map, reducing and aggregating state per key."""
    backend = KeyedStateBackend("stateful")
    value = backend.get_state(ValueStateDescriptor("v"))
    lst = backend.get_state(ListStateDescriptor("l"))
    mp = backend.get_state(MapStateDescriptor("m"))
    red = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    agg = backend.get_state(AggregatingStateDescriptor("a", Average()))
    backend.set_current_key("k")
    value.update(1)
    lst.add(1)
    lst.update([2, 3])
    mp.put_all({"x": 1, "y": 2})
    mp.remove("x")
    for n in (1, 2, 3):
        red.add(n)
        agg.add(n)
    assert (value.value(), lst.get(), mp.items(), list(mp.keys()), list(mp.values()), red.get(), agg.get()) == (
        1, [2, 3], [("y", 2)], ["y"], [2], 6, 2.0)
    backend.set_current_key("other")
    assert (value.value(), lst.get(), mp.is_empty(), red.get(), agg.get()) == (None, [], True, None, None)
    with pytest.raises(JobError, match="cannot hold None"):
        lst.add(None)


def test_descriptor_name_reused_with_another_type_names_the_operator() -> None:
    """Issue 30: a state descriptor name reused with another type is a clear error naming the operator."""
    backend = KeyedStateBackend("sessions")
    backend.get_state(ValueStateDescriptor("count"))
    with pytest.raises(JobError, match=r"operator 'sessions': state name 'count' is used by a value state and a list one"):
        backend.get_state(ListStateDescriptor("count"))
    backend.get_state(ValueStateDescriptor("count"))  # the same kind again is the same state


def test_restored_state_of_another_type_is_refused() -> None:
    """TtlStateTestBase::testRestoreTtlAndRegisterNonTtlStateCompatFailure: restoring a TTL
    state and registering it without TTL fails."""
    descriptor = ValueStateDescriptor("v")
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(100).build())
    backend = KeyedStateBackend("op", clock=lambda: 0)
    backend.set_current_key(1)
    backend.get_state(descriptor).update(1)
    restored = KeyedStateBackend("op")
    restored.restore(backend.snapshot(), KeyGroupRange.all())
    with pytest.raises(JobError, match=r"state name 'v' is used by a value \(with TTL\) state and a value one"):
        restored.get_state(ValueStateDescriptor("v"))
