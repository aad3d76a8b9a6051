"""Issue 29.3: operators ask for device memory; placement packs by each device's memory across
mixed fleets, explains a miss per device, and the ledger keeps every byte."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from accelflow import AccelflowInternalError, AllocationError, ConfigError
from accelflow.scheduling import (
    DeviceKey,
    DeviceLedger,
    ResourceProfile,
    SlotRequest,
    SubtaskRequest,
    TaskExecutorOffer,
    device_memory,
    offer_from_ledger,
    place,
)
from accelflow.scheduling import _packing, _reference

F = Fraction
GIB = 2**30
MIB = 2**20


def gpus(te: str, *sizes_gib: int, slots: int = 4, free: dict[str, Fraction] | None = None) -> TaskExecutorOffer:
    """A TaskExecutor whose GPU ``i`` has ``sizes_gib[i]`` GiB, all free."""
    addresses = [str(i) for i in range(len(sizes_gib))]
    return TaskExecutorOffer(
        te, slots, slots, {"gpu": {a: (free or {}).get(a, F(1)) for a in addresses}},
        {"gpu": {a: (s * GIB, s * GIB) for a, s in zip(addresses, sizes_gib)}},
    )


def profile(request: Any, operator: str = "embed") -> ResourceProfile:
    return ResourceProfile.parse({"gpu": request}, operator=operator)


def job(*requests: Any) -> list[SlotRequest]:
    return [SlotRequest((SubtaskRequest(i, f"embed ({i + 1}/{len(requests)})", profile(r)),))
            for i, r in enumerate(requests)]


def where(assignments: list[Any]) -> list[tuple[str, str, int]]:
    """Per slot: TaskExecutor, GPU address and the GiB it takes."""
    out = []
    for a in assignments:
        ((holder, shares),) = a.shares.items()
        ((device, _),) = shares.items()
        out.append((a.taskexecutor, device.address, a.memory.get(holder, {}).get(device, 0) // GIB))
    return out


# -- asking ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("memory", "size"), [
    ("10Gi", 10 * GIB), ("512Mi", 512 * MIB), ("10G", 10 * 10**9), ("1.5Gi", 1536 * MIB), (4096, 4096),
    ("4096", 4096),
])
def test_memory_is_asked_as_a_kubernetes_quantity(memory: object, size: int) -> None:
    alone = profile({"memory": memory})
    assert alone.memory == {"gpu": size} and alone["gpu"] == 0
    shared = profile({"amount": 0.5, "memory": memory})
    assert shared.memory == {"gpu": size} and shared["gpu"] == F(1, 2)


def test_memory_is_part_of_what_a_profile_is() -> None:
    assert profile({"memory": "10Gi"}) == profile({"memory": 10 * GIB})
    assert profile({"memory": "10Gi"}) != profile({"memory": "20Gi"})
    assert hash(profile({"memory": "10Gi"})) != hash(ResourceProfile({"gpu": F(0)}))
    assert repr(profile({"amount": 0.5, "memory": "1.5Gi"})) == "ResourceProfile(gpu={amount: 0.5, memory: 1.5 GiB})"
    assert profile({"memory": "10Gi"}).describe("gpu") == "10 GiB of memory"


def test_ten_gigs_is_refused_naming_the_operator_and_the_accepted_forms() -> None:
    with pytest.raises(ConfigError) as info:
        profile({"memory": "10 Gigs"}, operator="classify")
    assert info.value.keys == ("operator 'classify' resources['gpu']['memory']",)
    assert "'10 Gigs' is not a Kubernetes quantity" in str(info.value)
    assert "'10Gi', '512Mi', '1.5Gi', '10G' or a number of bytes" in str(info.value)


@pytest.mark.parametrize(("request_", "match"), [
    ({"mem": "10Gi"}, "unknown key\\(s\\) 'mem'"),
    ({"amount": 0.5}, "no 'memory'"),
    ({"memory": "0"}, "must be positive"),
    ({"memory": "1500m"}, "did you mean 'Mi'"),
    ({"amount": 1.5, "memory": "1Gi"}, "must fit on one device"),
])
def test_bad_memory_requests_name_the_key(request_: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        profile(request_, operator="classify")
    assert info.value.keys[0].startswith("operator 'classify' resources['gpu']")


def test_a_device_memory_comes_from_its_info() -> None:
    assert device_memory({"index": "0", "memory_total": "24576"}) == 24 * GIB
    assert device_memory({"index": "0"}) is None
    assert device_memory({"index": "0", "memory_total": "[N/A]"}) is None


# -- placing -----------------------------------------------------------------------------------
def test_memory_alone_goes_to_the_tightest_device_that_has_it_or_the_freest() -> None:
    fleet = [gpus("taskexecutor-1", 80, 24)]
    assert where(place(job({"memory": "10Gi"}), fleet, "pack")) == [("taskexecutor-1", "1", 10)]
    assert where(place(job({"memory": "10Gi"}), fleet, "spread")) == [("taskexecutor-1", "0", 10)]
    assert where(place(job({"memory": "30Gi"}), fleet, "pack")) == [("taskexecutor-1", "0", 30)]


def test_a_share_without_memory_takes_its_share_of_the_memory() -> None:
    fleet = [gpus("taskexecutor-1", 80)]
    (a,) = place(job(0.5), fleet)
    assert a.memory == {0: {DeviceKey("taskexecutor-1", "gpu", "0"): 40 * GIB}}
    with pytest.raises(AllocationError) as info:
        place(job(0.5, {"memory": "50Gi"}), fleet)
    assert info.value.reasons[0] == "taskexecutor-1: gpu 0 has 40 GiB free of 80 GiB, 50 GiB needed"


def test_a_share_with_memory_takes_that_memory_and_a_whole_device_takes_all() -> None:
    fleet = [gpus("taskexecutor-1", 80, 24)]
    shared, whole = place(job({"amount": 0.5, "memory": "60Gi"}, {"amount": 1, "memory": "20Gi"}), fleet)
    assert where([shared, whole]) == [("taskexecutor-1", "0", 60), ("taskexecutor-1", "1", 24)]


def test_a_whole_device_with_memory_is_the_smallest_large_enough() -> None:
    fleet = [gpus("taskexecutor-1", 80, 24, 40)]
    assert where(place(job({"amount": 1, "memory": "30Gi"}), fleet, "pack")) == [("taskexecutor-1", "2", 40)]
    assert where(place(job({"amount": 1, "memory": "30Gi"}), fleet, "spread")) == [("taskexecutor-1", "0", 80)]
    with pytest.raises(AllocationError, match="gpu needs 1 whole device\\(s\\) with at least 90 GiB of memory"):
        place(job({"amount": 1, "memory": "90Gi"}), fleet)


def test_a_miss_is_explained_per_device() -> None:
    fleet = [gpus("taskexecutor-1", 80, 24)]
    fleet[0].memory["gpu"] = {"0": (6 * GIB, 80 * GIB), "1": (6 * GIB, 24 * GIB)}
    with pytest.raises(AllocationError) as info:
        place(job({"memory": "10Gi"}), fleet)
    assert info.value.reasons == (
        "taskexecutor-1: gpu 0 has 6 GiB free of 80 GiB, 10 GiB needed",
        "taskexecutor-1: gpu 1 has 6 GiB free of 24 GiB, 10 GiB needed",
        "an exhaustive search of every packing found none",
    )


def test_a_request_larger_than_every_device_names_the_largest() -> None:
    fleet = [gpus("taskexecutor-1", 24), gpus("taskexecutor-2", 24, 80)]
    with pytest.raises(AllocationError) as info:
        place(job({"memory": "100Gi"}), fleet)
    first = str(info.value).splitlines()[0]
    assert "embed (1/1) asking for gpu: 100 GiB of memory" in first
    assert "no gpu has 100 GiB of memory: the largest is taskexecutor-2: gpu 1 with 80 GiB" in first


def test_devices_of_unknown_memory_take_no_memory_request() -> None:
    fleet = [TaskExecutorOffer("taskexecutor-1", 2, 2, {"gpu": {"0": F(1)}})]
    assert len(place(job(0.5), fleet)) == 1  # a share still goes there
    with pytest.raises(AllocationError) as info:
        place(job({"memory": "1Gi"}), fleet)
    assert "no gpu reports its memory size (the 'memory_total' property" in str(info.value)
    assert info.value.reasons[0] == "taskexecutor-1: gpu 0 has no known memory size, 1 GiB needed"


def test_when_first_fit_strands_a_request_the_search_finds_the_packing() -> None:
    """20, 60, 24 GiB on a 24 and an 80 GiB GPU: first fit puts the 20 on the 24 GiB GPU and
    then has no room for the 24; the packing 20 + 60 / 24 exists."""
    fleet = [gpus("taskexecutor-1", 80, 24)]
    requests = job({"memory": "20Gi"}, {"memory": "60Gi"}, {"memory": "24Gi"})
    for placer in (place, _reference.place):
        assert sorted(where(placer(requests, fleet, "pack"))) == [
            ("taskexecutor-1", "0", 20), ("taskexecutor-1", "0", 60), ("taskexecutor-1", "1", 24)]


def test_without_the_search_first_fit_refuses_that_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelflow.scheduling import _index

    monkeypatch.setattr(_index, "wants_memory", lambda requests: False)
    with pytest.raises(AllocationError):
        place(job({"memory": "20Gi"}, {"memory": "60Gi"}, {"memory": "24Gi"}), [gpus("taskexecutor-1", 80, 24)])


def test_a_refusal_says_what_the_search_did(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = [gpus("taskexecutor-1", 80, 24)]
    with pytest.raises(AllocationError) as info:
        place(job({"memory": "30Gi"}, {"memory": "60Gi"}), fleet)
    assert info.value.reasons[-1] == "an exhaustive search of every packing found none"
    monkeypatch.setattr(_packing, "SEARCH_BUDGET", 1)
    with pytest.raises(AllocationError) as info:
        place(job({"memory": "20Gi"}, {"memory": "60Gi"}, {"memory": "24Gi"}), fleet)
    assert "gave up after 1 device choices; a packing may still exist" in info.value.reasons[-1]


# -- the ledger --------------------------------------------------------------------------------
GPU0 = DeviceKey("taskexecutor-1", "gpu", "0")
GPU1 = DeviceKey("taskexecutor-1", "gpu", "1")


@pytest.fixture
def ledger() -> DeviceLedger:
    book = DeviceLedger()
    book.add_devices([GPU0, GPU1], memory={GPU0: 80 * GIB})  # gpu 1: memory unknown
    return book


def test_the_ledger_keeps_every_byte(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: F(0)}, memory={GPU0: 10 * GIB})
    ledger.acquire("b", {GPU0: F(1, 2)}, memory={GPU0: 40 * GIB})
    assert ledger.memory(GPU0) == (30 * GIB, 80 * GIB)
    assert ledger.memory_held_by("a") == {GPU0: 10 * GIB}
    assert ledger.statistics()[0]["holders_memory"] == {"a": 10 * GIB, "b": 40 * GIB}
    assert ledger.release("a") == {GPU0: F(0)}
    assert ledger.memory(GPU0) == (40 * GIB, 80 * GIB)
    assert ledger.memory(GPU1) is None and "memory_free" not in ledger.statistics()[1]


@pytest.mark.parametrize(("shares", "memory", "match"), [
    ({GPU0: F(0)}, {}, "asked for 0 of"),
    ({GPU0: F(0)}, {GPU0: 81 * GIB}, "which has 85899345920 bytes free"),
    ({GPU1: F(0)}, {GPU1: GIB}, "which has unknown memory"),
    ({GPU0: F(1, 2)}, {GPU1: GIB}, "takes memory of a device it takes no share of"),
])
def test_the_ledger_refuses_memory_it_does_not_have(
    ledger: DeviceLedger, shares: dict[DeviceKey, Fraction], memory: dict[DeviceKey, int], match: str
) -> None:
    with pytest.raises(AccelflowInternalError, match=match):
        ledger.acquire("a", shares, memory=memory)
    assert not ledger.is_holder("a") and ledger.memory(GPU0) == (80 * GIB, 80 * GIB)


def test_a_quarantined_device_gets_no_new_share_and_lists_its_holders(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: F(1, 2)}, memory={GPU0: 40 * GIB})
    assert ledger.quarantine(GPU0, "Xid 79: GPU has fallen off the bus") == {"a": F(1, 2)}
    with pytest.raises(AccelflowInternalError, match="which is quarantined \\(Xid 79"):
        ledger.acquire("b", {GPU0: F(1, 4)})
    assert offer_from_ledger(ledger, "taskexecutor-1", 1, 2).quarantined == {
        "gpu": {"0": "Xid 79: GPU has fallen off the bus"}}
    ledger.release("a")  # its holder still gives it back
    assert ledger.free(GPU0) == 1 and ledger.memory(GPU0) == (80 * GIB, 80 * GIB)
    ledger.rejoin(GPU0)
    ledger.acquire("b", {GPU0: F(1, 4)})
    ledger.remove_taskexecutor("taskexecutor-1")
    assert ledger.quarantined() == {} and ledger.memory(GPU0) is None


def test_placement_skips_a_quarantined_device_and_says_why(ledger: DeviceLedger) -> None:
    ledger.quarantine(GPU0, "Xid 48: Double Bit ECC Error")
    offer = offer_from_ledger(ledger, "taskexecutor-1", 2, 2)
    (a,) = place(job(0.5), [offer])
    assert list(a.shares[0]) == [GPU1]
    with pytest.raises(AllocationError) as info:
        place(job({"memory": "1Gi"}), [offer])
    assert info.value.reasons[0] == "taskexecutor-1: gpu 0 is quarantined: Xid 48: Double Bit ECC Error"
