"""Issue 31: refusals stay readable at scale and are computed only on failure; placement tries
O(requests + TaskExecutors) TaskExecutors, not O(requests x TaskExecutors)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from accelflow import AllocationError
from accelflow.scheduling import (
    ResourceProfile,
    SlotRequest,
    SubtaskRequest,
    TaskExecutorOffer,
    place,
)
from accelflow.scheduling import _capacity, _index, _reference
from accelflow.scheduling._explain import FLAT_LIMIT, grouped

F = Fraction
HALF = ResourceProfile({"gpu": F(1, 2)})


def te(i: int, free_slots: int = 16, gpu: Fraction = F(1), gpus: int = 8) -> TaskExecutorOffer:
    return TaskExecutorOffer(f"taskexecutor-{i}", free_slots, 16, {"gpu": {str(a): gpu for a in range(gpus)}})


def job(n: int, profile: ResourceProfile = HALF) -> list[SlotRequest]:
    return [SlotRequest((SubtaskRequest(i, f"embed ({i + 1}/{n})", profile),)) for i in range(n)]


@pytest.mark.parametrize("policy", ["pack", "spread"])
def test_a_refusal_on_1000_taskexecutors_reads_in_two_lines(policy: Any) -> None:
    offers = [te(i, free_slots=0) for i in range(1, 641)] + [te(i, gpu=F(3, 10)) for i in range(641, 1001)]
    with pytest.raises(AllocationError) as info:
        place(job(1), offers, policy)
    assert info.value.reasons == (
        "taskexecutor-1..640: no free slot (16 of 16 used)",
        "taskexecutor-641..1000: gpu has at most 0.3 free, 0.5 needed",
    )
    assert str(info.value).splitlines()[0] == (
        "cannot place embed (1/1) asking for gpu: 0.5 on any of 1000 TaskExecutor(s) (16000 slots in all):"
    )


def test_the_reasons_are_those_of_the_moment_the_job_ran_out() -> None:
    """Ten TaskExecutors with 2 slots: the 21st subtask finds every slot taken by the first 20."""
    with pytest.raises(AllocationError) as info:
        place(job(21), [TaskExecutorOffer(f"taskexecutor-{i}", 2, 2, {"gpu": {"0": F(1)}}) for i in range(1, 11)])
    assert info.value.reasons == tuple(f"taskexecutor-{i}: no free slot (2 of 2 used)" for i in range(1, 11))


def test_up_to_the_flat_limit_every_device_has_its_line_and_past_it_they_are_grouped() -> None:
    four = [te(i, gpu=F(3, 10)) for i in range(1, 5)]
    with pytest.raises(AllocationError) as info:
        place(job(1), four)
    assert len(info.value.reasons) == 32 == FLAT_LIMIT
    assert info.value.reasons[:2] == (
        "taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed",
        "taskexecutor-1: gpu 1 has 0.3 free, 0.5 needed",
    )
    with pytest.raises(AllocationError) as info:
        place(job(1), [*four, te(5, gpu=F(1, 5))])
    assert info.value.reasons == (
        "taskexecutor-1..4: gpu has at most 0.3 free, 0.5 needed",
        "taskexecutor-5: gpu has at most 0.2 free, 0.5 needed",
    )


def test_whole_device_and_missing_resource_reasons_are_summed_up_without_their_devices() -> None:
    offers = [te(i, gpu=F(1, 2)) for i in range(1, 40)] + [TaskExecutorOffer("taskexecutor-40", 4, 4)]
    with pytest.raises(AllocationError) as info:
        place(job(1, ResourceProfile({"gpu": F(2)})), offers, "spread")
    assert info.value.reasons == (
        "taskexecutor-1..39: gpu needs 2 whole device(s), 0 of 8 are wholly free",
        "taskexecutor-40: has no gpu",
    )


def test_a_missing_taskexecutor_does_not_split_a_range_and_scattered_ones_are_counted() -> None:
    assert grouped({f"te-{i}": "no free slot" for i in range(1, 41) if i != 5}) == ["te-1..40: no free slot"]
    alternating = {f"te-{i}": "no free slot" if i % 2 else "has no gpu" for i in range(1, 41)}
    assert grouped(alternating) == [
        "te-1, te-3, te-5, te-7, te-9, te-11, te-13, te-15, ... (20 TaskExecutors in 20 ranges): no free slot",
        "te-2, te-4, te-6, te-8, te-10, te-12, te-14, te-16, ... (20 TaskExecutors in 20 ranges): has no gpu",
    ]


class Counting:
    """Wraps a function and counts its calls."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.fn(*args)


@pytest.mark.parametrize("policy", ["pack", "spread"])
def test_the_explanation_is_computed_only_on_failure(policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    refusals = Counting(_reference.refusal)
    monkeypatch.setattr(_index, "refusal", refusals)
    offers = [te(i) for i in range(1, 101)]
    assert len(place(job(1600), offers, policy)) == 1600  # every slot and share: 16 x 100
    assert refusals.calls == 0
    with pytest.raises(AllocationError, match=r"taskexecutor-1\.\.100: no free slot \(16 of 16 used\)"):
        place(job(1601), offers, policy)
    assert refusals.calls == 1


@pytest.mark.parametrize("policy", ["pack", "spread"])
def test_placing_10000_subtasks_on_1000_taskexecutors_tries_each_about_once(
    policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference tries every TaskExecutor it skips for every request (tens of millions of
    tries here); the index tries one per request plus, at most, one per TaskExecutor."""
    tries = Counting(_capacity.Plan.fit)
    monkeypatch.setattr(_capacity.Plan, "fit", lambda plan, free: tries(plan, free))
    assignments = place(job(10_000), [te(i) for i in range(1, 1001)], policy)
    assert tries.calls <= 10_000 + 1_000
    per_te: dict[str, int] = {}
    for a in assignments:
        per_te[a.taskexecutor] = per_te.get(a.taskexecutor, 0) + 1
    if policy == "pack":  # first fit: the first 625 TaskExecutors full (16 halves each)
        assert per_te == {f"taskexecutor-{i}": 16 for i in range(1, 626)}
    else:  # spread: ten each
        assert per_te == {f"taskexecutor-{i}": 10 for i in range(1, 1001)}
