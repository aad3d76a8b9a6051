"""Issue 29.5: property tests of memory and quarantine in placement.

* The incremental placement decides as the reference on clusters with device memory (some of
  it unknown) and quarantined devices, for requests with and without memory.
* 1,000 random sequences of deploy / release / inject (quarantine) / reset (rejoin) on a
  ledger and a capacity index kept in step as the JobManager keeps them: no share is ever
  placed on a quarantined device, no share or byte is lost or doubled, and the index always
  agrees with the ledger.
* Mixed fleet (80 GiB and 24 GiB GPUs): a job asking for memory is placed exactly when a
  packing exists (checked by brute force), within the documented search budget.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from fractions import Fraction

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from accelflow import AllocationError
from accelflow.scheduling import (
    CapacityIndex,
    DeviceKey,
    DeviceLedger,
    ResourceProfile,
    SlotAssignment,
    SlotRequest,
    SubtaskRequest,
    TaskExecutorOffer,
    natural_key,
    offer_from_ledger,
    place,
)
from accelflow.scheduling import _reference as reference
from accelflow.scheduling._assign import Policy

F = Fraction
GIB = 2**30
IDS = ["taskexecutor-1", "taskexecutor-2", "taskexecutor-10"]
ADDRESSES = ["0", "1", "10"]
SIZES = st.sampled_from([24 * GIB, 80 * GIB])
POLICY = st.sampled_from(["pack", "spread"])
SHARE = st.sampled_from([F(1, 4), F(1, 3), F(1, 2), F(3, 4)])
MEMORY = st.sampled_from([8, 16, 20, 24, 40, 60, 70]).map(lambda g: g * GIB)


@st.composite
def asks(draw: st.DrawFn) -> ResourceProfile:
    """One subtask's profile: a share, whole devices, memory alone or a share with memory."""
    kind = draw(st.sampled_from(["share", "whole", "memory", "both", "whole+memory", "none"]))
    if kind == "none":
        return ResourceProfile()
    amount = {"share": draw(SHARE), "both": draw(SHARE), "memory": F(0)}.get(kind, F(draw(st.integers(1, 2))))
    memory = draw(MEMORY) if kind in ("memory", "both", "whole+memory") else 0
    return ResourceProfile({"gpu": amount}, {"gpu": memory})


@st.composite
def requests(draw: st.DrawFn, tag: object = "", max_slots: int = 6) -> list[SlotRequest]:
    kinds = draw(st.lists(st.lists(asks(), min_size=1, max_size=2), min_size=1, max_size=3))
    picks = draw(st.lists(st.integers(0, len(kinds) - 1), min_size=1, max_size=max_slots))
    return [
        SlotRequest(tuple(SubtaskRequest((tag, i, j), f"op{j} ({i + 1})", p) for j, p in enumerate(kinds[k])))
        for i, k in enumerate(picks)
    ]


@st.composite
def offers(draw: st.DrawFn) -> list[TaskExecutorOffer]:
    """1-3 TaskExecutors, partly used, memory known or not, some devices quarantined."""
    out = []
    for te in draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True)):
        slots = draw(st.integers(0, 4))
        offer = TaskExecutorOffer(te, draw(st.integers(0, slots)), slots)
        for a in draw(st.lists(st.sampled_from(ADDRESSES), max_size=3, unique=True)):
            offer.devices.setdefault("gpu", {})[a] = draw(st.sampled_from([F(0), F(1), F(1, 2), F(1, 4)]))
            if draw(st.booleans()):
                total = draw(SIZES)
                offer.memory.setdefault("gpu", {})[a] = (draw(st.sampled_from([0, total // 2, total])), total)
            if draw(st.integers(0, 4)) == 0:
                offer.quarantined.setdefault("gpu", {})[a] = "Xid 79: GPU has fallen off the bus"
        out.append(offer)
    return out


def outcome(placer: object, *args: object) -> list[SlotAssignment] | tuple[str, tuple[str, ...]]:
    try:
        return placer(*args)  # type: ignore[operator, no-any-return]
    except AllocationError as exc:
        return str(exc).splitlines()[0], exc.reasons


@settings(max_examples=300, deadline=None)
@given(cluster=offers(), job=requests(), policy=POLICY)
def test_the_index_decides_as_the_reference_with_memory_and_quarantine(
    cluster: list[TaskExecutorOffer], job: list[SlotRequest], policy: Policy
) -> None:
    assert outcome(place, job, cluster, policy) == outcome(reference.place, job, cluster, policy)


# -- sequences on a ledger and an index, kept in step ------------------------------------------
class Cluster:
    """A ledger and a capacity index changed together, as the JobManager's ``ClusterState``
    changes them (phase 2 wires the same calls there)."""

    def __init__(self, policy: Policy) -> None:
        self.ledger, self.index, self.policy = DeviceLedger(), CapacityIndex(), policy
        self.slots: dict[str, list[int]] = {}  # te -> [used, total]
        self.running: list[tuple[SlotAssignment, dict[Hashable, dict[DeviceKey, int]]]] = []

    def join(self, te: str, slots: int, sizes: list[int | None]) -> None:
        keys = [DeviceKey(te, "gpu", str(i)) for i in range(len(sizes))]
        self.ledger.add_devices(keys, memory={k: s for k, s in zip(keys, sizes) if s})
        self.slots[te] = [0, slots]
        self.refresh(te)

    def refresh(self, te: str) -> None:
        used, total = self.slots[te]
        self.index.put(offer_from_ledger(self.ledger, te, total - used, total))

    def deploy(self, job: list[SlotRequest]) -> None:
        try:
            assignments = self.index.place(job, self.policy)
        except AllocationError:
            return
        quarantined = self.ledger.quarantined()
        for a in assignments:
            self.slots[a.taskexecutor][0] += 1
            for holder, shares in a.shares.items():
                assert not set(shares) & set(quarantined), "a share placed on a quarantined device"
                self.ledger.acquire(holder, shares, a.memory.get(holder))  # refuses any over-commit
            self.running.append((a, {h: dict(m) for h, m in a.memory.items()}))

    def release(self, n: int) -> None:
        """Slot ``n`` ends: its subtasks give back their devices, then the slot."""
        a, memory = self.running.pop(n % len(self.running))
        for holder, shares in a.shares.items():
            assert self.ledger.memory_held_by(holder) == memory.get(holder, {})
            assert self.ledger.release(holder) == shares  # nothing lost on the way
            self.index.release(a.taskexecutor, shares, memory=memory.get(holder))
        self.slots[a.taskexecutor][0] -= 1
        self.index.release(a.taskexecutor, slots=1)

    def inject(self, device: DeviceKey, fail_now: bool) -> None:
        """A hardware fault: quarantine; the device's subtasks fail (now, or on a later
        release, as their exits arrive)."""
        holders = self.ledger.quarantine(device, "Xid 48: Double Bit ECC Error")
        self.refresh(device.taskexecutor)
        if fail_now:
            for n in reversed(range(len(self.running))):
                if set(self.running[n][0].shares) & set(holders):
                    self.release(n)

    def reset(self, device: DeviceKey) -> None:
        self.ledger.rejoin(device)
        self.refresh(device.taskexecutor)

    def check(self) -> None:
        expected = [offer_from_ledger(self.ledger, te, t - u, t)
                    for te, (u, t) in sorted(self.slots.items(), key=lambda kv: natural_key(kv[0]))]
        assert self.index.offers() == expected
        for row in self.ledger.statistics():
            assert row["free"] + sum(row["holders"].values(), F(0)) == 1  # type: ignore[operator, attr-defined]
            if "memory_total" in row:
                held = sum(row["holders_memory"].values())  # type: ignore[attr-defined]
                assert row["memory_free"] + held == row["memory_total"]  # type: ignore[operator]
                assert row["memory_free"] >= 0  # type: ignore[operator]


OPS = st.lists(st.one_of(
    st.tuples(st.just("deploy"), st.integers(0, 10**6)),
    st.tuples(st.just("release"), st.integers(0, 100)),
    st.tuples(st.just("inject"), st.sampled_from(IDS), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("reset"), st.sampled_from(IDS), st.integers(0, 2)),
), min_size=1, max_size=15)


@settings(max_examples=1000, deadline=None)
@given(fleet=st.lists(st.tuples(st.integers(1, 4), st.lists(st.one_of(st.none(), SIZES), min_size=1, max_size=3)),
                      min_size=1, max_size=3),
       ops=OPS, policy=POLICY, data=st.data())
def test_no_share_lands_on_a_quarantined_device_and_none_is_lost_or_doubled(
    fleet: list[tuple[int, list[int | None]]], ops: list[tuple[object, ...]], policy: Policy, data: st.DataObject
) -> None:
    cluster = Cluster(policy)
    for te, (slots, sizes) in zip(IDS, fleet):
        cluster.join(te, slots, sizes)
    for n, (op, *args) in enumerate(ops):
        device = DeviceKey(str(args[0]), "gpu", str(args[1])) if op in ("inject", "reset") else None
        if op == "deploy":
            cluster.deploy(data.draw(requests(tag=n, max_slots=4)))
        elif op == "release" and cluster.running:
            cluster.release(int(args[0]))  # type: ignore[call-overload]
        elif device is not None and device.taskexecutor in cluster.slots and device in cluster.ledger.devices():
            cluster.inject(device, bool(args[2])) if op == "inject" else cluster.reset(device)
        cluster.check()
    while cluster.running:  # every subtask ends: everything comes back
        cluster.release(0)
    cluster.check()
    assert all(row["free"] == 1 and not row["holders"] for row in cluster.ledger.statistics())


# -- a mixed fleet: placed exactly when a packing exists ---------------------------------------
def packing_exists(job: list[SlotRequest], cluster: list[TaskExecutorOffer]) -> bool:
    """Brute force over every TaskExecutor per slot and device per subtask (fresh devices)."""
    devices = {o.id: sorted(o.devices["gpu"]) for o in cluster}
    sizes = {(o.id, a): o.memory["gpu"][a][1] for o in cluster for a in o.devices["gpu"]}
    slots = {o.id: o.free_slots for o in cluster}
    subtasks = [s for r in job for s in r.subtasks]
    for tes in itertools.product(slots, repeat=len(job)):
        if any(tes.count(te) > n for te, n in slots.items()):
            continue
        homes = [te for te, r in zip(tes, job) for _ in r.subtasks]
        for picks in itertools.product(*(devices[te] if s.profile else [""] for te, s in zip(homes, subtasks))):
            if all(_device_holds([(s.profile, sizes[te, a]) for te2, a2, s in zip(homes, picks, subtasks)
                                  if (te2, a2) == (te, a) and s.profile]) for te, a in sizes):
                return True
    return False


def _device_holds(holders: list[tuple[ResourceProfile, int]]) -> bool:
    whole = [p for p, _ in holders if p["gpu"] >= 1]
    if whole:
        return len(holders) == 1 and whole[0]["gpu"] == 1 and holders[0][1] >= whole[0].memory.get("gpu", 0)
    share = sum((p["gpu"] for p, _ in holders), F(0))
    memory = sum(p.memory.get("gpu") or p["gpu"].numerator * total // p["gpu"].denominator for p, total in holders)
    return share <= 1 and memory <= holders[0][1] if holders else True


@st.composite
def mixed_fleet(draw: st.DrawFn) -> list[TaskExecutorOffer]:
    out = []
    for te in IDS[: draw(st.integers(1, 2))]:
        sizes = draw(st.lists(SIZES, min_size=1, max_size=2))
        offer = TaskExecutorOffer(te, draw(st.integers(1, 3)), 3)
        for i, size in enumerate(sizes):
            offer.devices.setdefault("gpu", {})[str(i)] = F(1)
            offer.memory.setdefault("gpu", {})[str(i)] = (size, size)
        out.append(offer)
    return out


@settings(max_examples=400, deadline=None)
@given(cluster=mixed_fleet(), job=requests(max_slots=4), policy=POLICY)
def test_on_a_mixed_fleet_a_memory_job_is_placed_exactly_when_a_packing_exists(
    cluster: list[TaskExecutorOffer], job: list[SlotRequest], policy: Policy
) -> None:
    assume(any(s.profile.memory for r in job for s in r.subtasks))  # the guarantee's scope
    assume(all(p["gpu"] <= 1 for r in job for s in r.subtasks if (p := s.profile)))  # one device each
    exists = packing_exists(job, cluster)
    try:
        placed = place(job, cluster, policy)
    except AllocationError as exc:
        assert not exists, f"a packing exists but the job was refused: {exc}"
        assert exc.reasons[-1] == "an exhaustive search of every packing found none"  # within budget
        return
    assert exists
    by_device: dict[DeviceKey, list[tuple[ResourceProfile, int]]] = {}
    for a in placed:
        for s in (s for r in job for s in r.subtasks if s.holder in a.shares):
            for key in a.shares[s.holder]:
                total = next(o for o in cluster if o.id == key.taskexecutor).memory["gpu"][key.address][1]
                by_device.setdefault(key, []).append((s.profile, total))
    assert all(_device_holds(holders) for holders in by_device.values())  # nothing over-committed
