"""Pure placement: Spark's allocator cases (notes §6 items 17-19, 21-23) adapted to our model.

Model: a slot request holds subtask *i* of every chain; it takes one slot of one TaskExecutor
and every device share its subtasks ask for there. Whole requests take wholly free devices; a
share must fit on one device. Amounts are exact fractions.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelflow import AllocationError
from accelflow.scheduling import (
    DeviceKey,
    DeviceLedger,
    ResourceProfile,
    SlotAssignment,
    SlotRequest,
    SubtaskRequest,
    TaskExecutorOffer,
    natural_key,
    place,
)
from accelflow.scheduling._assign import Policy

F = Fraction


def profile(**amounts: object) -> ResourceProfile:
    return ResourceProfile.parse(amounts, operator="op")  # type: ignore[arg-type]


def slot(holder: Hashable, **amounts: object) -> SlotRequest:
    return SlotRequest((SubtaskRequest(holder, f"op ({holder})", profile(**amounts)),))


def offer(te: str, slots: int = 64, **devices: Mapping[str, Fraction | int] | int) -> TaskExecutorOffer:
    """``gpu=4`` is four wholly free GPUs "0".."3"; ``gpu={"0": F(3, 10)}`` gives free shares."""
    built = {
        r: ({str(i): F(1) for i in range(d)} if isinstance(d, int) else {a: F(s) for a, s in d.items()})
        for r, d in devices.items()
    }
    return TaskExecutorOffer(te, slots, slots, built)


def where(assignment: SlotAssignment) -> dict[str, Fraction]:
    """``{"gpu 0": 1/5}`` for a one-subtask slot."""
    (shares,) = assignment.shares.values()
    return {f"{d.resource} {d.address}": s for d, s in shares.items()}


class Cluster:
    """What the JobManager does around ``place``: offers from the ledger, then acquire."""

    def __init__(self, *offers: TaskExecutorOffer, policy: Policy = "pack") -> None:
        self.ledger = DeviceLedger()
        self.slots = {o.id: o.total_slots for o in offers}
        self.used: dict[Hashable, str] = {}
        self.policy = policy
        for o in offers:
            self.ledger.add_devices(
                DeviceKey(o.id, r, a) for r, addresses in o.devices.items() for a in addresses
            )

    def offers(self) -> list[TaskExecutorOffer]:
        out = []
        for te, total in self.slots.items():
            devices: dict[str, dict[str, Fraction]] = {}
            for d in self.ledger.devices():
                if d.taskexecutor == te:
                    devices.setdefault(d.resource, {})[d.address] = self.ledger.free(d)
            used = sum(1 for t in self.used.values() if t == te)
            out.append(TaskExecutorOffer(te, total - used, total, devices))
        return out

    def request(self, holder: Hashable, **amounts: object) -> dict[str, Fraction]:
        (assignment,) = self.place([slot(holder, **amounts)])
        return where(assignment)

    def place(self, requests: list[SlotRequest]) -> list[SlotAssignment]:
        assignments = place(requests, self.offers(), self.policy)
        for a in assignments:
            for holder, shares in a.shares.items():
                self.ledger.acquire(holder, shares)
                self.used[holder] = a.taskexecutor
        return assignments

    def release(self, holder: Hashable) -> None:
        self.ledger.release(holder)
        self.used.pop(holder, None)

    def free(self, te: str = "taskexecutor-1", resource: str = "gpu") -> dict[str, Fraction]:
        return {
            d.address: self.ledger.free(d)
            for d in self.ledger.devices()
            if d.taskexecutor == te and d.resource == resource
        }


# -- Spark §6 item 17: the allocator walk-through ------------------------------------------------
def test_item_17_fractional_and_whole_requests_share_four_gpus() -> None:
    c = Cluster(offer("taskexecutor-1", gpu=4))
    assert c.request("a", gpu=0.2) == {"gpu 0": F(1, 5)}
    assert c.request("b", gpu=0.2) == {"gpu 0": F(1, 5)}  # pack: fill gpu 0 first
    assert c.free()["0"] == F(3, 5)
    assert c.request("c", gpu=2) == {"gpu 1": 1, "gpu 2": 1}  # whole: wholly free only
    c.release("b")
    assert c.free() == {"0": F(4, 5), "1": 0, "2": 0, "3": 1}
    assert c.request("d", gpu=0.50002) == {"gpu 0": F(50002, 100000)}  # fits in 0.8 exactly
    assert c.request("e", gpu=1) == {"gpu 3": 1}
    assert c.free()["0"] == F(29998, 100000)
    with pytest.raises(AllocationError) as info:
        c.request("f", gpu=0.3)  # 0.29998 left is not 0.3: exact, no rounding up
    assert "taskexecutor-1: gpu 0 has 0.29998 free, 0.3 needed" in info.value.reasons
    assert c.request("g", gpu=0.2) == {"gpu 0": F(1, 5)}
    c.release("c")
    assert c.request("h", gpu=0.2) == {"gpu 1": F(1, 5)}  # 0.09998 left on gpu 0 is too little
    assert c.free() == {"0": F(9998, 100000), "1": F(4, 5), "2": 1, "3": 0}


def test_item_17_release_gives_the_exact_share_back() -> None:
    c = Cluster(offer("taskexecutor-1", gpu=4))
    c.request("a", gpu=0.2)
    c.request("b", gpu=0.2)
    c.request("c", gpu=2)
    c.release("a")
    c.release("c")
    assert c.free() == {"0": F(4, 5), "1": 1, "2": 1, "3": 1}
    c.release("b")
    assert c.free() == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert all(not c.ledger.holders(d) for d in c.ledger.devices())


# -- item 18: 1/k packing with exact fractions -----------------------------------------------------
@pytest.mark.parametrize(("k", "devices"), [(3, 2), (7, 3), (9, 4), (10, 2), (97, 2), (1000, 1)])
def test_item_18_k_shares_of_1_over_k_fill_every_device(k: int, devices: int) -> None:
    requests = [slot(i, gpu=F(1, k)) for i in range(k * devices)]
    assignments = place(requests, [offer("taskexecutor-1", slots=k * devices + 1, gpu=devices)])
    per_device: dict[str, int] = {}
    for a in assignments:
        (address,) = where(a)
        per_device[address] = per_device.get(address, 0) + 1
    assert per_device == {f"gpu {i}": k for i in range(devices)}
    with pytest.raises(AllocationError, match=f"gpu 0 has 0 free, 1/{k} needed|has 0 free"):
        place(requests + [slot("one more", gpu=F(1, k))],
              [offer("taskexecutor-1", slots=k * devices + 1, gpu=devices)])


def test_item_18_thirty_one_thousand_shares_of_one_gpu() -> None:
    k = 31235
    c = Cluster(offer("taskexecutor-1", slots=k + 1, gpu=1))
    for i in range(k):
        c.ledger.acquire(i, {DeviceKey("taskexecutor-1", "gpu", "0"): F(1, k)})
    assert c.free() == {"0": 0}
    with pytest.raises(AllocationError, match=f"taskexecutor-1: gpu 0 has 0 free, 1/{k} needed"):
        c.request("one more", gpu=F(1, k))


def test_item_18_large_k_through_place() -> None:
    k = 31235
    requests = [slot(i, gpu=F(1, k)) for i in range(k)]
    assignments = place(requests, [offer("taskexecutor-1", slots=k, gpu=1)])
    assert len(assignments) == k
    assert sum((where(a)["gpu 0"] for a in assignments), F(0)) == 1


def test_ten_tenths_fit_one_gpu_exactly_and_an_eleventh_does_not() -> None:
    c = Cluster(offer("taskexecutor-1", gpu=1))
    for i in range(10):
        assert c.request(i, gpu=0.1) == {"gpu 0": F(1, 10)}
    with pytest.raises(AllocationError):
        c.request(10, gpu=0.1)


# -- item 19: all or nothing --------------------------------------------------------------------
def test_item_19_a_multi_resource_request_takes_nothing_when_one_resource_is_short() -> None:
    offers = [offer("taskexecutor-1", gpu=1, fpga={"0": F(4, 5)})]
    before = [o.copy() for o in offers]
    with pytest.raises(AllocationError) as info:
        place([slot("x", gpu=0.3, fpga=0.9)], offers)
    assert "taskexecutor-1: fpga 0 has 0.8 free, 0.9 needed" in info.value.reasons
    assert offers == before  # item 21: only the round's snapshot is touched


def test_item_19_a_job_is_placed_whole_or_not_at_all() -> None:
    c = Cluster(offer("taskexecutor-1", gpu=2))
    with pytest.raises(AllocationError):
        c.place([slot("a", gpu=1), slot("b", gpu=1), slot("c", gpu=1)])
    assert c.free() == {"0": 1, "1": 1}
    assert c.used == {}


def test_item_19_a_slot_whose_second_subtask_does_not_fit_moves_to_the_next_taskexecutor() -> None:
    request = SlotRequest((
        SubtaskRequest("decode", "decode (1/1)", profile(gpu=0.5)),
        SubtaskRequest("classify", "classify (1/1)", profile(gpu=1)),
    ))
    offers = [offer("taskexecutor-1", gpu={"0": F(1, 2)}), offer("taskexecutor-2", gpu=2)]
    (assignment,) = place([request], offers)
    assert assignment.taskexecutor == "taskexecutor-2"
    assert {h: dict(s) for h, s in assignment.shares.items()} == {
        "classify": {DeviceKey("taskexecutor-2", "gpu", "0"): F(1)},  # largest first
        "decode": {DeviceKey("taskexecutor-2", "gpu", "1"): F(1, 2)},
    }


def test_item_21_place_never_mutates_the_offers() -> None:
    offers = [offer("taskexecutor-1", slots=4, gpu=2), offer("taskexecutor-2", slots=4, gpu=2)]
    before = [o.copy() for o in offers]
    place([slot(i, gpu=0.5) for i in range(6)], offers)
    assert offers == before


# -- item 22: slots limit tasks; offers without the resource get none ---------------------------------
def test_item_22_two_slots_four_gpus_one_gpu_each() -> None:
    c = Cluster(offer("taskexecutor-1", slots=2, gpu=4))
    assignments = c.place([slot("a", gpu=1), slot("b", gpu=1)])
    assert [where(a) for a in assignments] == [{"gpu 0": 1}, {"gpu 1": 1}]
    with pytest.raises(AllocationError) as info:
        c.request("c", gpu=1)
    assert info.value.reasons == ("taskexecutor-1: no free slot (2 of 2 used)",)


def test_item_22_an_offer_without_gpus_gets_no_gpu_task() -> None:
    with pytest.raises(AllocationError) as info:
        place([slot("a", gpu=1)], [offer("taskexecutor-1", slots=4)])
    assert info.value.reasons == ("taskexecutor-1: has no gpu",)
    assert "cannot place op (a) asking for gpu: 1 on any of 1 TaskExecutor(s) (4 slots in all)" in str(info.value)


def test_item_22_requests_without_resources_only_need_slots() -> None:
    assignments = place([slot(i) for i in range(3)], [offer("taskexecutor-1", slots=2), offer("taskexecutor-2", slots=2)])
    assert [a.taskexecutor for a in assignments] == ["taskexecutor-1", "taskexecutor-1", "taskexecutor-2"]
    with pytest.raises(AllocationError, match="no free slot for op \\(x\\)"):
        place([slot(i) for i in range(4)] + [slot("x")], [offer("taskexecutor-1", slots=2), offer("taskexecutor-2", slots=2)])


# -- item 23: 0.33 of one GPU, four slots --------------------------------------------------------------
def test_item_23_three_shares_of_0_33_on_one_gpu() -> None:
    c = Cluster(offer("taskexecutor-1", slots=4, gpu=1))
    assignments = c.place([slot(i, gpu=0.33) for i in range(3)])
    assert [where(a) for a in assignments] == [{"gpu 0": F(33, 100)}] * 3
    with pytest.raises(AllocationError) as info:
        c.request(3, gpu=0.33)
    assert info.value.reasons == ("taskexecutor-1: gpu 0 has 0.01 free, 0.33 needed",)


# -- policies, ordering, whole versus fractional -----------------------------------------------------
def test_pack_fills_a_gpu_before_the_next_and_spread_balances() -> None:
    packed = place([slot(i, gpu=0.5) for i in range(2)], [offer("taskexecutor-1", gpu=2)], "pack")
    spread = place([slot(i, gpu=0.5) for i in range(2)], [offer("taskexecutor-1", gpu=2)], "spread")
    assert [where(a) for a in packed] == [{"gpu 0": F(1, 2)}, {"gpu 0": F(1, 2)}]
    assert [where(a) for a in spread] == [{"gpu 0": F(1, 2)}, {"gpu 1": F(1, 2)}]


def test_pack_fills_a_taskexecutor_before_the_next_and_spread_alternates() -> None:
    offers = [offer("taskexecutor-1", slots=4, gpu=2), offer("taskexecutor-2", slots=4, gpu=2)]
    packed = place([slot(i, gpu=1) for i in range(4)], offers, "pack")
    spread = place([slot(i, gpu=1) for i in range(4)], offers, "spread")
    assert [a.taskexecutor for a in packed] == ["taskexecutor-1"] * 2 + ["taskexecutor-2"] * 2
    assert [a.taskexecutor for a in spread] == ["taskexecutor-1", "taskexecutor-2"] * 2


def test_pack_prefers_the_fullest_device_that_still_fits() -> None:
    (a,) = place([slot("x", gpu=0.25)], [offer("taskexecutor-1", gpu={"0": 1, "1": F(1, 2), "2": F(1, 5)})])
    assert where(a) == {"gpu 1": F(1, 4)}  # best fit: 0.2 is too little, 0.5 is the tightest fit
    (b,) = place([slot("x", gpu=0.25)], [offer("taskexecutor-1", gpu={"0": F(1, 2), "1": 1, "2": F(1, 5)})], "spread")
    assert where(b) == {"gpu 1": F(1, 4)}  # spread: the emptiest device


def test_addresses_are_ordered_numerically_not_as_strings() -> None:
    assert sorted(["10", "2", "1", "gpu10", "gpu2"], key=natural_key) == ["1", "2", "10", "gpu2", "gpu10"]
    devices = {a: F(1) for a in ["10", "2", "11", "1"]}
    (a,) = place([slot("x", gpu=3)], [offer("taskexecutor-1", gpu=devices)])
    assert where(a) == {"gpu 1": 1, "gpu 2": 1, "gpu 10": 1}


def test_taskexecutors_are_ordered_numerically() -> None:
    offers = [offer("taskexecutor-10", slots=1), offer("taskexecutor-2", slots=1)]
    assert [a.taskexecutor for a in place([slot(1), slot(2)], offers)] == ["taskexecutor-2", "taskexecutor-10"]


def test_whole_requests_skip_partly_used_devices() -> None:
    (a,) = place([slot("x", gpu=1)], [offer("taskexecutor-1", gpu={"0": F(1, 2), "1": 1})])
    assert where(a) == {"gpu 1": 1}
    with pytest.raises(AllocationError) as info:
        place([slot("x", gpu=2)], [offer("taskexecutor-1", gpu={"0": F(1, 2), "1": 1})])
    assert info.value.reasons == (
        "taskexecutor-1: gpu needs 2 whole device(s), 1 of 2 are wholly free "
        "(gpu 0 has 0.5 free, gpu 1 has 1 free)",
    )


def test_a_share_must_fit_on_one_device_not_just_in_the_total() -> None:
    offers = [offer("taskexecutor-1", gpu={"0": F(3, 10), "1": F(3, 10)})]  # 0.6 free in all
    with pytest.raises(AllocationError) as info:
        place([slot("x", gpu=0.5)], offers)
    assert info.value.reasons == (
        "taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed",
        "taskexecutor-1: gpu 1 has 0.3 free, 0.5 needed",
    )


def test_the_failure_explains_every_taskexecutor_and_device() -> None:
    offers = [
        offer("taskexecutor-1", gpu={"0": F(3, 10), "1": 0}),
        offer("taskexecutor-2", slots=0, gpu=2),
        offer("taskexecutor-3"),
    ]
    with pytest.raises(AllocationError) as info:
        place([slot("x", gpu=0.5)], offers)
    assert info.value.reasons == (
        "taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed",
        "taskexecutor-1: gpu 1 has 0 free, 0.5 needed",
        "taskexecutor-2: no free slot (0 of 0 used)",
        "taskexecutor-3: has no gpu",
    )
    text = str(info.value)
    assert text.startswith("cannot place op (x) asking for gpu: 0.5 on any of 3 TaskExecutor(s)")
    assert "\n  taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed" in text


def test_a_request_for_more_devices_than_any_taskexecutor_has() -> None:
    offers = [offer("taskexecutor-1", gpu=2), offer("taskexecutor-2", gpu=2)]
    with pytest.raises(AllocationError) as info:
        place([slot("x", gpu=3)], offers)
    assert info.value.reasons == tuple(
        f"taskexecutor-{i}: gpu needs 3 whole device(s), 2 of 2 are wholly free "
        "(gpu 0 has 1 free, gpu 1 has 1 free)"
        for i in (1, 2)
    )


# -- property: never oversubscribed; a request that fits is placed -------------------------------------
AMOUNTS = st.one_of(
    st.integers(1, 3).map(F),
    st.fractions(min_value=F(1, 50), max_value=1, max_denominator=50),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.dictionaries(st.sampled_from(["gpu", "fpga"]), AMOUNTS, max_size=2)),
        st.tuples(st.just("release"), st.integers(0, 40)),
    ),
    max_size=40,
)


def _fits_somewhere(request: Mapping[str, Fraction], offers: list[TaskExecutorOffer]) -> bool:
    for o in offers:
        if o.free_slots < 1:
            continue
        ok = True
        for resource, amount in request.items():
            free = o.devices.get(resource, {}).values()
            if amount >= 1:
                ok &= sum(1 for f in free if f == 1) >= amount
            else:
                ok &= any(f >= amount for f in free)
        if ok:
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(ops=OPS, policy=st.sampled_from(["pack", "spread"]), slots=st.integers(1, 4))
def test_placements_never_oversubscribe_and_place_what_fits(
    ops: list[tuple[str, object]], policy: Policy, slots: int
) -> None:
    c = Cluster(
        offer("taskexecutor-1", slots=slots, gpu=2, fpga=1),
        offer("taskexecutor-2", slots=slots, gpu=3),
        policy=policy,
    )
    placed: list[int] = []
    for n, (op, arg) in enumerate(ops):
        if op == "release":
            if placed:
                c.release(placed.pop(int(arg) % len(placed)))  # type: ignore[call-overload]
        else:
            request = {r: F(a) for r, a in arg.items()}  # type: ignore[attr-defined]
            fits = _fits_somewhere(request, c.offers())
            try:
                c.request(n, **request)
            except AllocationError:
                assert not fits, f"{request} fits but was refused"
            else:
                assert fits, f"{request} was placed though nothing fits"
                placed.append(n)
        for device in c.ledger.devices():
            held = sum(c.ledger.holders(device).values(), F(0))
            assert 0 <= c.ledger.free(device) and held <= 1
        for o in c.offers():
            assert 0 <= o.free_slots <= o.total_slots


def test_a_slot_places_its_largest_shares_first() -> None:
    """0.3 + 0.4 + 0.3 fit on free shares 0.6 and 0.4 only if 0.4 goes first (best-fit
    decreasing); in declaration order, 0.3 would take the 0.4 device and 0.4 would strand."""
    request = SlotRequest(tuple(
        SubtaskRequest(name, f"{name} (1/1)", profile(gpu=amount))
        for name, amount in [("decode", 0.3), ("embed", 0.4), ("classify", 0.3)]
    ))
    (a,) = place([request], [offer("taskexecutor-1", gpu={"0": F(3, 5), "1": F(2, 5)})], "pack")
    got = {h: {d.address: s for d, s in shares.items()} for h, shares in a.shares.items()}
    assert got == {"embed": {"1": F(2, 5)}, "decode": {"0": F(3, 10)}, "classify": {"0": F(3, 10)}}


@settings(max_examples=150, deadline=None)
@given(
    job=st.lists(st.lists(st.dictionaries(st.just("gpu"), AMOUNTS, max_size=1), min_size=1, max_size=3),
                 min_size=1, max_size=6),
    policy=st.sampled_from(["pack", "spread"]),
)
def test_multi_subtask_slots_never_oversubscribe(job: list[list[dict[str, Fraction]]], policy: Policy) -> None:
    c = Cluster(offer("taskexecutor-1", slots=3, gpu=2), offer("taskexecutor-2", slots=3, gpu=2), policy=policy)
    requests = [
        SlotRequest(tuple(SubtaskRequest((i, j), f"op{j} ({i})", ResourceProfile(p)) for j, p in enumerate(slot_)))
        for i, slot_ in enumerate(job)
    ]
    try:
        assignments = c.place(requests)
    except AllocationError:
        assert c.used == {}  # all or nothing
        return
    for a, request in zip(assignments, requests):
        for sub in request.subtasks:
            shares = a.shares[sub.holder]
            assert all(d.taskexecutor == a.taskexecutor for d in shares)
            for resource, amount in sub.profile.items():
                mine = [s for d, s in shares.items() if d.resource == resource]
                assert mine == ([F(1)] * int(amount) if amount >= 1 else [amount])
    for device in c.ledger.devices():
        assert c.ledger.free(device) >= 0


# -- issue 12, item 8: a resource no TaskExecutor has says how to configure it ----------------------
GPU_HINT = (
    "no TaskExecutor has a gpu: configure it with 'external-resources: gpu', "
    "'external-resource.gpu.amount: 2' and 'external-resource.gpu.driver-factory.class: gpu' "
    "(see docs/configuration.md), or check that discovery found its devices"
)


def test_a_resource_no_taskexecutor_has_comes_with_the_keys_that_configure_it() -> None:
    with pytest.raises(AllocationError) as info:
        place([slot("a", gpu=2)], [offer("taskexecutor-1"), offer("taskexecutor-2", fpga=2)])
    first_line = str(info.value).splitlines()[0]  # what a pending job shows as its reason
    assert first_line == (
        "cannot place op (a) asking for gpu: 2 on any of 2 TaskExecutor(s) (128 slots in all); "
        f"{GPU_HINT}:"
    )
    assert info.value.reasons == ("taskexecutor-1: has no gpu", "taskexecutor-2: has no gpu")


def test_another_resource_names_its_own_keys_and_a_driver_placeholder() -> None:
    with pytest.raises(AllocationError) as info:
        place([slot("a", tpu=0.5)], [offer("taskexecutor-1")])
    assert "'external-resources: tpu', 'external-resource.tpu.amount: 1' and " \
           "'external-resource.tpu.driver-factory.class: <driver factory>'" in str(info.value)


def test_a_misspelt_resource_is_told_the_close_name() -> None:
    with pytest.raises(AllocationError) as info:
        place([slot("a", gpus=1)], [offer("taskexecutor-1", gpu=2)])
    assert "; no TaskExecutor has a gpus; did you mean 'gpu'?:" in str(info.value)
    assert "external-resources" not in str(info.value)


def test_no_hint_when_some_taskexecutor_has_the_resource_but_it_is_busy() -> None:
    with pytest.raises(AllocationError) as info:
        place([slot("a", gpu=1)], [offer("taskexecutor-1", gpu={"0": 0}), offer("taskexecutor-2")])
    assert "configure" not in str(info.value) and "did you mean" not in str(info.value)
    assert info.value.reasons == (
        "taskexecutor-1: gpu needs 1 whole device(s), 0 of 1 are wholly free (gpu 0 has 0 free)",
        "taskexecutor-2: has no gpu",
    )


def test_a_real_job_asking_for_an_unconfigured_gpu_says_how_to_configure_it() -> None:
    from accelflow import Environment

    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    with pytest.raises(AllocationError) as info:
        env.from_sequence(0, 1).map(abs, name="infer", resources={"gpu": 2}).execute_and_collect()
    assert GPU_HINT in str(info.value)
    assert info.value.reasons == ("taskexecutor-1: has no gpu",)
