"""The JobManager's side of device health (issue 29 phase 2), its parts alone on a manual
clock with a launcher that runs no process: device memory registered and placed by, device
reports quarantining and rejoining devices, the shares of a failed subtask held until its
TaskExecutor says they are free, and the drill's checks."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelflow import AllocationError, ConfigError
from accelflow.runtime import (
    Deploy, DeviceChange, DeviceReport, DevicesFree, InjectFault, ManualClock, RegisteredDevice,
    RegisteredResource, Registration, SubtaskKey,
)
from accelflow.runtime.jobmanager._deployment import Deployer
from accelflow.runtime.jobmanager._events import EventPump
from accelflow.runtime.jobmanager._jobs import SubtaskState
from accelflow.runtime.jobmanager._quarantine import inject_fault, on_device_event
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.scheduling import DeviceKey, ResourceProfile, SlotRequest, SubtaskRequest, offer_from_ledger
from jm_parts import ScriptedLauncher, job

GIB = 2**30
TE = "taskexecutor-1"


def gpus(*sizes_gib: int, watched: bool = True) -> RegisteredResource:
    devices = tuple(RegisteredDevice(str(i), {"index": str(i), "uuid": f"GPU-{i}", "memory_total": str(g * 1024)})
                    for i, g in enumerate(sizes_gib))
    return RegisteredResource("gpu", len(devices), "gpu", devices=devices, watched=watched)


def state_with(*sizes_gib: int, slots: int = 4, watched: bool = True) -> ClusterState:
    state = ClusterState()
    state.add_taskexecutor(Registration(TE, 1000, slots, (gpus(*sizes_gib, watched=watched),)))
    return state


def report(address: str, kind: str | None, reason: str = "Xid 79 (GPU has fallen off the bus)",
           permanent: bool = False) -> DeviceReport:
    change = None if kind is None else DeviceChange(kind, reason, 79, True, permanent)  # type: ignore[arg-type]
    return DeviceReport("gpu", address, f"GPU-{address}", {"state": kind or "healthy"}, change)


def request(key: SubtaskKey, resources: dict[str, Any]) -> SlotRequest:
    return SlotRequest((SubtaskRequest(key, f"map ({key.index + 1}/1)", ResourceProfile.parse(resources, operator="map")),))


def take(state: ClusterState, key: SubtaskKey, resources: dict[str, Any]) -> set[str]:
    """Place and take one subtask; the addresses it got."""
    [assignment] = state.place([request(key, resources)], "pack")
    state.take(key.job_id, key.attempt, [assignment])
    state.subtasks[key] = SubtaskState(key, "map", TE, {})
    return {d.address for d in state.ledger.held_by(key)}


def end(state: ClusterState, key: SubtaskKey, how: str) -> None:
    state.subtasks[key].state = how
    state.release_devices(key)


def test_devices_register_their_memory_and_a_memory_request_goes_to_one_that_has_it() -> None:
    state = state_with(24, 80)
    assert state.ledger.memory(DeviceKey(TE, "gpu", "1")) == (80 * GIB, 80 * GIB)
    key = SubtaskKey("job-1", 0, 0, 0)
    assert take(state, key, {"gpu": {"memory": "40Gi"}}) == {"1"}
    assert state.ledger.held_by(key) == {DeviceKey(TE, "gpu", "1"): Fraction(0)}
    assert state.capacity.offers()[0].memory["gpu"]["1"] == (40 * GIB, 80 * GIB)
    with pytest.raises(AllocationError, match="gpu 1 has 40 GiB free of 80 GiB, 50 GiB needed"):
        state.place([request(SubtaskKey("job-1", 0, 0, 1), {"gpu": {"memory": "50Gi"}})], "pack")


def test_the_descriptor_carries_the_memory_a_subtask_holds_as_its_limit(tmp_path: Path) -> None:
    launcher = ScriptedLauncher(tmp_path)
    state = state_with(24, 80)
    pump = EventPump(launcher, state, clock=ManualClock())
    submitted = job("job-1")
    env_node = submitted.graph.chains[1].nodes[0]
    object.__setattr__(env_node, "resources", ResourceProfile.parse({"gpu": {"memory": "30Gi"}}, operator="count"))
    state.jobs["job-1"] = submitted
    Deployer(launcher, state, pump, clock=ManualClock()).deploy(submitted)
    [desc] = [c.descriptor for _, c in launcher.commands(Deploy) if c.descriptor.key.chain == 1]
    assert desc.memory == {"gpu": {"1": 30 * GIB}}
    assert [(d.info().address, d.share) for d in desc.assigned["gpu"]] == [("1", Fraction(0))]


def test_a_quarantined_device_gets_no_share_until_it_rejoins() -> None:
    state = state_with(80, 80)
    on_device_event(state, TE, report("0", "quarantined"))
    assert state.ledger.quarantined() == {DeviceKey(TE, "gpu", "0"): "Xid 79 (GPU has fallen off the bus)"}
    assert state.health[DeviceKey(TE, "gpu", "0")] == {"state": "quarantined"}
    assert take(state, SubtaskKey("job-1", 0, 0, 0), {"gpu": 1}) == {"1"}
    with pytest.raises(AllocationError, match=r"gpu 0 has 1 free \(quarantined: Xid 79 \(GPU has fallen off the bus\)\)"):
        take(state, SubtaskKey("job-1", 0, 0, 1), {"gpu": 1})
    on_device_event(state, TE, report("0", "rejoined"))
    assert take(state, SubtaskKey("job-1", 0, 0, 1), {"gpu": 1}) == {"0"}


def test_a_job_waits_for_a_device_that_may_rejoin_but_not_for_one_out_for_good() -> None:
    state = state_with(80)
    on_device_event(state, TE, report("0", "quarantined"))
    empty = state.offers(empty=True)[0]
    assert empty.quarantined == {"gpu": {}}  # it may rejoin: a job waits (PENDING) for it
    on_device_event(state, TE, report("0", "quarantined", "Xid 79 (3 faults within 3600 s)", permanent=True))
    assert state.offers(empty=True)[0].quarantined == {"gpu": {"0": "Xid 79 (3 faults within 3600 s)"}}


def test_a_failed_subtask_s_shares_of_watched_devices_wait_for_devices_free() -> None:
    state = state_with(80, 80)
    failed, finished = SubtaskKey("job-1", 0, 0, 0), SubtaskKey("job-1", 0, 0, 1)
    take(state, failed, {"gpu": 1})
    take(state, finished, {"gpu": 1})
    end(state, finished, "FINISHED")  # it ended well: its shares come back at once
    end(state, failed, "FAILED")
    assert state.ledger.held_by(failed) == {DeviceKey(TE, "gpu", "0"): Fraction(1)}
    assert state.capacity.offers()[0].devices["gpu"] == {"0": Fraction(0), "1": Fraction(1)}
    on_device_event(state, TE, DevicesFree(failed))
    assert not state.ledger.is_holder(failed) and not state.reconciling
    assert state.capacity.offers()[0].devices["gpu"] == {"0": Fraction(1), "1": Fraction(1)}


def test_devices_free_before_the_jobmanager_is_done_releases_at_once_and_unwatched_devices_never_wait() -> None:
    state = state_with(80)
    key = SubtaskKey("job-1", 0, 0, 0)
    take(state, key, {"gpu": 1})
    on_device_event(state, TE, DevicesFree(key))  # the TaskExecutor was quicker
    end(state, key, "FAILED")
    assert not state.ledger.is_holder(key) and not state.freed_early
    unwatched = state_with(80, watched=False)
    take(unwatched, key, {"gpu": 1})
    end(unwatched, key, "CANCELED")
    assert not unwatched.ledger.is_holder(key)


def test_a_lost_taskexecutor_leaves_no_health_or_share_waiting() -> None:
    state = state_with(80)
    key = SubtaskKey("job-1", 0, 0, 0)
    take(state, key, {"gpu": 1})
    end(state, key, "FAILED")
    on_device_event(state, TE, report("0", "quarantined"))
    assert state.lose_taskexecutor(TE, 1000)
    assert state.reconciling == {} and state.health == {} and state.ledger.devices() == []
    on_device_event(state, TE, report("0", "rejoined"))  # late news of a gone TaskExecutor: ignored
    assert state.health == {}


def test_the_drill_checks_taskexecutor_device_and_xid_then_sends_inject_fault(tmp_path: Path) -> None:
    launcher = ScriptedLauncher(tmp_path)
    state = state_with(80, 24)
    assert inject_fault(state, launcher, TE, "1", "79") == InjectFault("gpu", "1", 79)
    assert launcher.sent == [(TE, InjectFault("gpu", "1", 79))]
    with pytest.raises(KeyError, match="no TaskExecutor 'taskexecutor-9'; registered: taskexecutor-1"):
        inject_fault(state, launcher, "taskexecutor-9", "0", 79)
    with pytest.raises(ConfigError, match=r"taskexecutor-1 has no gpu device '7'; it has: 0 \(GPU-0\), 1 \(GPU-1\) "
                                          r"\(give an index or a UUID\)"):
        inject_fault(state, launcher, TE, "7", 79)
    with pytest.raises(ConfigError, match="no gpu device 'GPU-7'"):
        inject_fault(state, launcher, TE, "GPU-7", 79)
    assert inject_fault(state, launcher, TE, "gpu-0", "79") == InjectFault("gpu", "0", 79)  # a UUID, as nvidia-smi -i
    with pytest.raises(ConfigError, match=r"--xid: Xid 999 is not in NVIDIA's Xid catalogue.*hardware: 46, 48"):
        inject_fault(state, launcher, TE, "0", 999)
    unwatched = state_with(80, watched=False)
    with pytest.raises(ConfigError, match="watches no resource None; it watches: none"):
        inject_fault(unwatched, launcher, TE, "0", 79)
    assert len(launcher.sent) == 2


_OPS = st.lists(st.tuples(st.sampled_from(["deploy", "finish", "fail", "free", "inject", "reset"]),
                          st.integers(0, 3), st.sampled_from([Fraction(1, 2), Fraction(1), Fraction(1, 4)])),
                max_size=30)


@settings(max_examples=1000, deadline=None)
@given(_OPS)
def test_no_share_is_placed_on_a_quarantined_device_nor_lost_or_doubled(ops: list[Any]) -> None:
    """1,000 random sequences of inject (quarantine) / reset (rejoin) / deploy / finish / fail /
    devices-free through the JobManager's own calls: every take succeeds on healthy devices only,
    and the ledger and the capacity index agree on every share and byte after every step."""
    state = state_with(80, 24, 80, 24, slots=64)
    devices = [DeviceKey(TE, "gpu", str(i)) for i in range(4)]
    live: list[SubtaskKey] = []
    ended: list[SubtaskKey] = []
    for n, (op, i, share) in enumerate(ops):
        if op == "deploy":
            key = SubtaskKey("job-1", 0, 0, n)
            try:
                got = take(state, key, {"gpu": share})
            except AllocationError:
                continue
            assert not {DeviceKey(TE, "gpu", a) for a in got} & set(state.ledger.quarantined())
            live.append(key)
        elif op in ("finish", "fail") and live:
            key = live.pop(i % len(live))
            end(state, key, "FINISHED" if op == "finish" else "FAILED")
            ended.append(key)
        elif op == "free" and ended:
            on_device_event(state, TE, DevicesFree(ended.pop(i % len(ended))))
        elif op in ("inject", "reset"):
            on_device_event(state, TE, report(devices[i].address, "quarantined" if op == "inject" else "rejoined"))
        index = {o.id: o for o in state.capacity.offers()}[TE]
        book = offer_from_ledger(state.ledger, TE, index.free_slots, index.total_slots)
        assert (index.devices, index.memory, index.quarantined) == (book.devices, book.memory, book.quarantined)
        for row in state.ledger.statistics():
            assert row["free"] + sum(row["holders"].values()) == 1
            assert row["memory_free"] + sum(row["holders_memory"].values()) == row["memory_total"]
