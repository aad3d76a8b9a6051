"""The device ledger: who holds which exact share of which device."""

from __future__ import annotations

from fractions import Fraction

import pytest

from accelflow import AccelflowInternalError
from accelflow.scheduling import DeviceKey, DeviceLedger

GPU0 = DeviceKey("taskexecutor-1", "gpu", "0")
GPU1 = DeviceKey("taskexecutor-1", "gpu", "1")
OTHER = DeviceKey("taskexecutor-2", "gpu", "0")


@pytest.fixture
def ledger() -> DeviceLedger:
    book = DeviceLedger()
    book.add_devices([GPU1, GPU0, OTHER])
    return book


def _check_invariant(book: DeviceLedger) -> None:
    for device in book.devices():
        held = sum(book.holders(device).values(), Fraction(0))
        assert book.free(device) + held == 1
        assert 0 <= book.free(device) <= 1


def test_new_devices_are_wholly_free_and_sorted(ledger: DeviceLedger) -> None:
    assert ledger.devices() == [GPU0, GPU1, OTHER]
    assert all(ledger.free(d) == 1 for d in ledger.devices())
    assert str(GPU0) == "taskexecutor-1: gpu 0"


def test_adding_a_device_twice_keeps_its_holders(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 2)})
    ledger.add_devices([GPU0])
    assert ledger.holders(GPU0) == {"a": Fraction(1, 2)}


def test_shares_add_up_exactly(ledger: DeviceLedger) -> None:
    for i in range(10):
        ledger.acquire(f"t{i}", {GPU0: Fraction(1, 10)})
    assert ledger.free(GPU0) == 0
    _check_invariant(ledger)
    with pytest.raises(AccelflowInternalError, match="has 0 free"):
        ledger.acquire("t10", {GPU0: Fraction(1, 10)})


def test_acquiring_the_same_device_twice_is_refused(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 4)})
    with pytest.raises(AccelflowInternalError, match="already holds taskexecutor-1: gpu 0"):
        ledger.acquire("a", {GPU0: Fraction(1, 4)})
    assert ledger.holders(GPU0) == {"a": Fraction(1, 4)}


def test_acquiring_an_unknown_device_is_refused(ledger: DeviceLedger) -> None:
    ghost = DeviceKey("taskexecutor-1", "gpu", "6")
    with pytest.raises(AccelflowInternalError, match="unknown device taskexecutor-1: gpu 6"):
        ledger.acquire("a", {GPU0: Fraction(1, 2), ghost: Fraction(1)})
    assert ledger.free(GPU0) == 1  # all or nothing


def test_over_acquiring_is_refused_and_takes_nothing(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU1: Fraction(7, 10)})
    with pytest.raises(AccelflowInternalError, match="asked for 1/2 of taskexecutor-1: gpu 1, which has 3/10 free"):
        ledger.acquire("b", {GPU0: Fraction(1), GPU1: Fraction(1, 2)})
    assert ledger.free(GPU0) == 1
    assert ledger.held_by("b") == {}
    _check_invariant(ledger)


@pytest.mark.parametrize("share", [Fraction(0), Fraction(-1, 2)])
def test_non_positive_shares_are_refused(ledger: DeviceLedger, share: Fraction) -> None:
    with pytest.raises(AccelflowInternalError):
        ledger.acquire("a", {GPU0: share})
    assert ledger.holders(GPU0) == {}


def test_release_returns_exactly_what_was_held(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 3), OTHER: Fraction(1)})
    ledger.acquire("b", {GPU0: Fraction(1, 3)})
    assert ledger.held_by("a") == {GPU0: Fraction(1, 3), OTHER: Fraction(1)}
    assert ledger.release("a") == {GPU0: Fraction(1, 3), OTHER: Fraction(1)}
    assert ledger.free(GPU0) == Fraction(2, 3)
    assert ledger.free(OTHER) == 1
    assert ledger.holders(GPU0) == {"b": Fraction(1, 3)}
    _check_invariant(ledger)


def test_releasing_twice_is_refused(ledger: DeviceLedger) -> None:
    """Spark: releasing an address the task does not hold is an error (issue 12.6)."""
    ledger.acquire("a", {GPU0: Fraction(1, 3)})
    ledger.release("a")
    with pytest.raises(AccelflowInternalError, match="'a' releases devices it does not hold"):
        ledger.release("a")
    assert ledger.free(GPU0) == 1
    _check_invariant(ledger)


def test_releasing_an_unknown_holder_is_refused(ledger: DeviceLedger) -> None:
    with pytest.raises(AccelflowInternalError, match="'nobody' releases devices it does not hold"):
        ledger.release("nobody")
    assert all(ledger.free(d) == 1 for d in ledger.devices())


def test_releasing_a_device_the_holder_does_not_hold_is_refused_and_releases_nothing(
    ledger: DeviceLedger,
) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 2)})
    ledger.acquire("b", {GPU1: Fraction(1)})
    with pytest.raises(AccelflowInternalError, match="'a' releases taskexecutor-1: gpu 1, which it does not hold"):
        ledger.release("a", [GPU0, GPU1])
    assert ledger.held_by("a") == {GPU0: Fraction(1, 2)}
    assert ledger.holders(GPU1) == {"b": Fraction(1)}
    _check_invariant(ledger)


def test_releasing_some_devices_keeps_the_others(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 2), GPU1: Fraction(1, 4)})
    assert ledger.release("a", [GPU1]) == {GPU1: Fraction(1, 4)}
    assert ledger.held_by("a") == {GPU0: Fraction(1, 2)} and ledger.is_holder("a")
    assert ledger.release("a", [GPU0]) == {GPU0: Fraction(1, 2)}
    assert not ledger.is_holder("a")
    _check_invariant(ledger)


def test_a_holder_of_no_device_releases_nothing_once(ledger: DeviceLedger) -> None:
    ledger.acquire("cpu-only", {})
    assert ledger.release("cpu-only") == {}
    with pytest.raises(AccelflowInternalError):
        ledger.release("cpu-only")


def test_release_if_held_is_for_cleanup_paths(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 2)})
    assert ledger.release_if_held("a") == {GPU0: Fraction(1, 2)}
    assert ledger.release_if_held("a") == {}
    assert ledger.release_if_held("nobody") == {}
    _check_invariant(ledger)


def test_removing_a_taskexecutor_forgets_its_devices_and_holders(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 2), OTHER: Fraction(1, 2)})
    ledger.remove_taskexecutor("taskexecutor-1")
    assert ledger.devices() == [OTHER]
    assert ledger.held_by("a") == {OTHER: Fraction(1, 2)}
    assert ledger.release("a") == {OTHER: Fraction(1, 2)}


def test_a_holder_whose_taskexecutor_was_removed_may_still_release(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 2)})
    ledger.remove_taskexecutor("taskexecutor-1")
    assert ledger.release("a") == {}  # its devices are gone; the holder was still known
    with pytest.raises(AccelflowInternalError):
        ledger.release("a")


def test_statistics_list_free_share_and_holders(ledger: DeviceLedger) -> None:
    ledger.acquire("a", {GPU0: Fraction(1, 4)})
    rows = ledger.statistics()
    assert rows[0] == {
        "taskexecutor": "taskexecutor-1", "resource": "gpu", "address": "0",
        "free": Fraction(3, 4), "holders": {"a": Fraction(1, 4)},
    }
    assert [r["free"] for r in rows[1:]] == [1, 1]
