"""Issue 31: the incremental placement decides exactly as the plain reference does.

Random small clusters (natural-order traps in the ids and addresses, partly used devices,
slots running out) and random slot requests (whole and fractional amounts with various
denominators, several resources, several subtasks per slot, kinds of request repeated as a
job repeats them): :func:`accelflow.scheduling.place` gives the reference's assignments, or
fails with the reference's message and reasons; it never over-commits a slot or a device; and
a long-lived :class:`CapacityIndex` (the JobManager's) agrees with the reference after any
sequence of placements, releases, lost and new TaskExecutors.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelflow import AllocationError
from accelflow.scheduling import (
    CapacityIndex,
    DeviceKey,
    ResourceProfile,
    SlotAssignment,
    SlotRequest,
    SubtaskRequest,
    TaskExecutorOffer,
    natural_key,
    place,
)
from accelflow.scheduling import _reference as reference
from accelflow.scheduling._assign import Policy

F = Fraction
IDS = ["taskexecutor-1", "taskexecutor-2", "taskexecutor-10", "taskexecutor-11", "worker-a"]
ADDRESSES = ["0", "1", "2", "10"]
FREE = st.one_of(st.just(F(0)), st.just(F(1)), st.fractions(0, 1, max_denominator=12))
AMOUNT = st.one_of(st.integers(1, 2).map(F), st.fractions(F(1, 12), 1, max_denominator=12))
PROFILE = st.dictionaries(st.sampled_from(["gpu", "fpga", "tpu"]), AMOUNT, max_size=2).map(ResourceProfile)
POLICY = st.sampled_from(["pack", "spread"])


@st.composite
def offers(draw: st.DrawFn, fresh: bool = False) -> list[TaskExecutorOffer]:
    """1-4 TaskExecutors in random order; ``fresh``: nothing used yet."""
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=4, unique=True))
    out = []
    for te in ids:
        slots = draw(st.integers(0, 4))
        devices = {}
        for resource in draw(st.lists(st.sampled_from(["gpu", "fpga"]), max_size=2, unique=True)):
            addresses = draw(st.lists(st.sampled_from(ADDRESSES), max_size=3, unique=True))
            devices[resource] = {a: F(1) if fresh else draw(FREE) for a in addresses}
        out.append(TaskExecutorOffer(te, slots if fresh else draw(st.integers(0, slots)), slots, devices))
    return out


@st.composite
def requests(draw: st.DrawFn, tag: object = "") -> list[SlotRequest]:
    """A job's slot requests: a few kinds of slot (1-3 subtasks), each repeated; the kinds share
    their ``ResourceProfile`` objects, as a job's slots share their chains' profiles."""
    kinds = draw(st.lists(st.lists(PROFILE, min_size=1, max_size=3), min_size=1, max_size=3))
    picks = draw(st.lists(st.integers(0, len(kinds) - 1), min_size=1, max_size=10))
    return [
        SlotRequest(tuple(SubtaskRequest((tag, i, j), f"op{j} ({i + 1})", p) for j, p in enumerate(kinds[k])))
        for i, k in enumerate(picks)
    ]


def outcome(placer: object, *args: object) -> list[SlotAssignment] | tuple[str, tuple[str, ...]]:
    try:
        return placer(*args)  # type: ignore[operator, no-any-return]
    except AllocationError as exc:
        return str(exc).splitlines()[0], exc.reasons


def assert_within(assignments: list[SlotAssignment], requests: list[SlotRequest],
                  offers: list[TaskExecutorOffer]) -> None:
    """No slot and no device is given beyond what was free; every subtask gets what it asked."""
    free = {o.id: o.free_slots for o in offers}
    shares = {DeviceKey(o.id, r, a): s for o in offers for r, d in o.devices.items() for a, s in d.items()}
    for assignment, request in zip(assignments, requests, strict=True):
        free[assignment.taskexecutor] -= 1
        for sub in request.subtasks:
            taken = assignment.shares[sub.holder]
            for device, share in taken.items():
                assert device.taskexecutor == assignment.taskexecutor
                shares[device] -= share
            for resource, amount in sub.profile.items():
                mine = sorted(s for d, s in taken.items() if d.resource == resource)
                assert mine == ([F(1)] * int(amount) if amount >= 1 else [amount])
    assert all(n >= 0 for n in free.values()), free
    assert all(s >= 0 for s in shares.values()), shares


@settings(max_examples=300, deadline=None)
@given(cluster=offers(), job=requests(), policy=POLICY)
def test_place_decides_as_the_reference_and_never_over_commits(
    cluster: list[TaskExecutorOffer], job: list[SlotRequest], policy: Policy
) -> None:
    expected = outcome(reference.place, job, cluster, policy)
    got = outcome(place, job, cluster, policy)
    assert got == expected
    if isinstance(got, list):
        assert_within(got, job, cluster)


@settings(max_examples=150, deadline=None)
@given(cluster=offers(fresh=True), job=requests(), policy=POLICY)
def test_on_an_empty_cluster_too(cluster: list[TaskExecutorOffer], job: list[SlotRequest], policy: Policy) -> None:
    assert outcome(place, job, cluster, policy) == outcome(reference.place, job, cluster, policy)


class Model:
    """The cluster as plain offers, changed by hand: what the index must agree with."""

    def __init__(self, cluster: list[TaskExecutorOffer]) -> None:
        self.offers = {o.id: o.copy() for o in cluster}
        self.placed: list[SlotAssignment] = []

    def take(self, assignments: list[SlotAssignment]) -> None:
        for a in assignments:
            self.offers[a.taskexecutor].free_slots -= 1
            self._add(a, -1)
        self.placed += assignments

    def release(self, index: int) -> SlotAssignment:
        a = self.placed.pop(index % len(self.placed))
        self.offers[a.taskexecutor].free_slots += 1
        self._add(a, 1)
        return a

    def lose(self, te: str) -> None:
        del self.offers[te]
        self.placed = [a for a in self.placed if a.taskexecutor != te]

    def _add(self, a: SlotAssignment, sign: int) -> None:
        for shares in a.shares.values():
            for d, s in shares.items():
                self.offers[d.taskexecutor].devices[d.resource][d.address] += sign * s

    def sorted(self) -> list[TaskExecutorOffer]:
        return sorted(self.offers.values(), key=lambda o: natural_key(o.id))


OPS = st.lists(st.one_of(
    st.tuples(st.just("place"), st.integers(0, 10**6)),
    st.tuples(st.just("release"), st.integers(0, 100)),
    st.tuples(st.just("lose"), st.sampled_from(IDS)),
    st.tuples(st.just("join"), st.sampled_from([*IDS, "taskexecutor-12", "taskexecutor-0"])),
), max_size=12)


@settings(max_examples=150, deadline=None)
@given(cluster=offers(fresh=True), ops=OPS, policy=POLICY, data=st.data())
def test_a_long_lived_index_agrees_with_the_reference_after_any_changes(
    cluster: list[TaskExecutorOffer], ops: list[tuple[str, object]], policy: Policy, data: st.DataObject
) -> None:
    """What the JobManager does: one index for the cluster's life, told of every release and
    every TaskExecutor lost or joining (partly used, with new denominators now and then)."""
    index, model = CapacityIndex(cluster), Model(cluster)
    for n, (op, arg) in enumerate(ops):
        if op == "place":
            job = data.draw(requests(tag=n))
            expected = outcome(reference.place, job, model.sorted(), policy)
            got = outcome(index.place, job, policy)
            assert got == expected
            if isinstance(got, list):
                model.take(got)
        elif op == "release" and model.placed:
            released = model.release(int(arg))  # type: ignore[call-overload]
            for shares in released.shares.values():  # each subtask ends, then its slot is free
                index.release(released.taskexecutor, shares)
            index.release(released.taskexecutor, slots=1)
        elif op == "lose" and arg in model.offers and len(model.offers) > 1:
            model.lose(str(arg))
            index.remove(str(arg))
        elif op == "join" and arg not in model.offers:
            joined = data.draw(offers()).pop()  # partly used: new denominators
            joined.id = str(arg)
            model.offers[joined.id] = joined.copy()
            index.put(joined)
        assert index.offers() == model.sorted()


def test_a_refused_job_leaves_the_index_as_it_was() -> None:
    cluster = [TaskExecutorOffer("taskexecutor-1", 2, 2, {"gpu": {"0": F(1)}})]
    index = CapacityIndex(cluster)
    half = ResourceProfile({"gpu": F(1, 2)})
    job = [SlotRequest((SubtaskRequest(i, f"op ({i})", half),)) for i in range(3)]
    with pytest.raises(AllocationError, match="no free slot"):
        index.place(job, "pack")
    assert index.offers() == cluster


def test_duplicate_offers_are_an_internal_error() -> None:
    from accelflow import AccelflowInternalError

    te = TaskExecutorOffer("taskexecutor-1", 1, 1)
    with pytest.raises(AccelflowInternalError, match="two offers for taskexecutor-1"):
        place([], [te, te.copy()])


def test_the_index_built_on_a_busy_cluster_is_not_rebuilt_as_shares_come_back() -> None:
    """The tree is built at the first placement, maybe on a busy cluster; giving shares back
    later must not need a rebuild (O(n)) per release."""
    cluster = [TaskExecutorOffer(f"taskexecutor-{i}", 4, 4, {"gpu": {"0": F(1, 4), "1": F(1)}}) for i in (1, 2)]
    index = CapacityIndex(cluster)
    half = ResourceProfile({"gpu": F(1, 2)})
    (a,) = index.place([SlotRequest((SubtaskRequest("a", "a", half),))], "spread")
    tree = index._tree
    index.release("taskexecutor-2", {DeviceKey("taskexecutor-2", "gpu", "0"): F(3, 4)})  # held before
    index.release(a.taskexecutor, a.shares["a"], slots=1)
    assert index._tree is tree
    assert [o.devices["gpu"] for o in index.offers()] == [{"0": F(1, 4), "1": F(1)}, {"0": F(1), "1": F(1)}]
