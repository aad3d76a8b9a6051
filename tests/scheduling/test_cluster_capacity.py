"""Issue 31: the JobManager's capacity index follows its ledger and slot book, change by change,
without rescanning the cluster (the state the ``Deployer`` places with)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from accelflow import AllocationError
from accelflow.runtime import RegisteredDevice, RegisteredResource, Registration, SubtaskKey
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.scheduling import ResourceProfile, SlotAssignment, SlotRequest, SubtaskRequest, place

HALF = ResourceProfile({"gpu": Fraction(1, 2)})


def registration(te: str, slots: int = 2, gpus: int = 1, pid: int = 0) -> Registration:
    devices = tuple(RegisteredDevice(str(i), {"index": str(i)}) for i in range(gpus))
    return Registration(te, pid, slots, (RegisteredResource("gpu", gpus, "gpu", devices=devices),))


def cluster(n: int, **kwargs: Any) -> ClusterState:
    state = ClusterState()
    for i in range(1, n + 1):
        state.add_taskexecutor(registration(f"taskexecutor-{i}", pid=i, **kwargs))
    return state


def job(attempt: int, n: int, profile: ResourceProfile = HALF) -> list[SlotRequest]:
    return [SlotRequest((SubtaskRequest(SubtaskKey("job-1", attempt, 0, i), f"embed ({i + 1}/{n})", profile),))
            for i in range(n)]


def deploy(state: ClusterState, attempt: int, requests: list[SlotRequest], policy: Any = "pack") -> list[SlotAssignment]:
    """What ``Deployer.deploy`` does with the state, under its lock."""
    with state.lock:
        assignments = state.place(requests, policy)
        state.take("job-1", attempt, assignments)
    return assignments


def assert_in_step(state: ClusterState) -> None:
    assert state.capacity.offers() == state.offers()


def test_the_index_follows_every_change_of_the_ledger_and_the_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    state = cluster(3)
    monkeypatch.setattr(state.ledger, "devices", lambda: pytest.fail("a scan of every device in the cluster"))
    assert_in_step(state)
    placed = deploy(state, 0, job(0, 5))
    assert [a.taskexecutor for a in placed] == ["taskexecutor-1"] * 2 + ["taskexecutor-2"] * 2 + ["taskexecutor-3"]
    assert_in_step(state)
    for a in placed[:3]:
        for key in a.shares:
            state.release_devices(key)  # subtasks that finished
    assert_in_step(state)
    state.release_slots("job-1", 0)
    assert_in_step(state)
    assert all(o.free_slots == 2 for o in state.capacity.offers())


def test_a_lost_taskexecutors_subtasks_are_placed_again_on_the_others() -> None:
    state = cluster(4)
    placed = deploy(state, 0, job(0, 6))
    lost = [a for a in placed if a.taskexecutor == "taskexecutor-1"]
    assert len(lost) == 2
    assert state.lose_taskexecutor("taskexecutor-1", 1)
    for a in lost:
        for key in a.shares:
            state.release_devices(key)  # its devices are gone with it: nothing to give back
    assert_in_step(state)
    again = deploy(state, 1, [SlotRequest(tuple(
        SubtaskRequest(SubtaskKey("job-1", 1, 0, k.index), "embed", HALF) for k in a.shares))  # type: ignore[attr-defined]
        for a in lost])
    assert [a.taskexecutor for a in again] == ["taskexecutor-4", "taskexecutor-4"]
    assert_in_step(state)
    with pytest.raises(AllocationError) as info:
        deploy(state, 2, job(2, 1))
    assert info.value.reasons == tuple(f"taskexecutor-{i}: no free slot (2 of 2 used)" for i in (2, 3, 4))
    assert_in_step(state)  # a refused placement takes nothing


def test_a_replacement_taskexecutor_registers_with_the_lost_ones_id() -> None:
    state = cluster(3)
    deploy(state, 0, job(0, 6))
    state.lose_taskexecutor("taskexecutor-2", 2)
    state.add_taskexecutor(registration("taskexecutor-2", pid=22))
    assert_in_step(state)
    (again,) = deploy(state, 1, job(1, 1), "spread")
    assert again.taskexecutor == "taskexecutor-2"
    assert_in_step(state)


def test_the_index_places_as_the_pure_place_on_the_states_offers() -> None:
    state = cluster(5, slots=3, gpus=2)
    deploy(state, 0, job(0, 4, ResourceProfile({"gpu": Fraction(1, 3)})), "spread")
    requests = job(1, 6, ResourceProfile({"gpu": Fraction(3, 4)}))  # thirds, then quarters
    expected = place(requests, state.offers(), "spread")
    assert deploy(state, 1, requests, "spread") == expected


def test_a_replacement_does_not_get_back_the_slots_its_lost_predecessor_held() -> None:
    """The lost TaskExecutor's attempt ends after the replacement registered under its id
    (a session replaces at once; an abort waits for subtasks): its slots died with it, so
    the replacement keeps all of its own, not one more."""
    state = cluster(2)
    deploy(state, 0, job(0, 4))
    state.lose_taskexecutor("taskexecutor-2", 2)
    state.add_taskexecutor(registration("taskexecutor-2", pid=22))
    state.release_slots("job-1", 0)
    assert [(o.id, o.free_slots) for o in state.offers()] == [("taskexecutor-1", 2), ("taskexecutor-2", 2)]
    assert_in_step(state)
