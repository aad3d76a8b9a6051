"""Issue 29.1/29.2: one device's health as a state machine driven by faults, probes and resets,
on an injected clock (no sleeping), and its ``param.health.*`` keys."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow import ConfigError
from accelflow.resources import (
    ApplicationFault,
    DeviceHealth,
    DeviceQuarantined,
    DeviceRef,
    DeviceRejoined,
    Fault,
    HealthConfig,
    ProbeResult,
    split_health_params,
)
from accelflow.resources.gpu._xid import DOUBLE_BIT_ECC, xid_fault

GOOD = ProbeResult(reachable=True, retired_pages_pending=False, remapped_rows_pending=False, temperature=40)
GPU1 = DeviceRef("gpu", "1", "GPU-8f6c")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def health(clock: Clock, **config: Any) -> DeviceHealth:
    return DeviceHealth(GPU1, HealthConfig(**{"rejoin_probes": 2, **config}), clock=clock)


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_hardware_xid_quarantines_until_a_reset_and_good_probes(clock: Clock) -> None:
    device = health(clock)
    (event,) = device.fault(xid_fault(79))
    assert event == DeviceQuarantined(GPU1, "Xid 79 (GPU has fallen off the bus)", 79, 1000.0,
                                      fail_subtasks=True, needs_reset=True, permanent=False)
    assert event.describe() == "gpu 1 (GPU-8f6c) failed: Xid 79 (GPU has fallen off the bus); quarantined"
    for _ in range(5):  # passing probes do not mean the card was reset
        assert device.probe(GOOD) == []
    assert device.state == "quarantined"
    device.reset()
    clock.now += 30
    assert device.probe(GOOD) == [] and device.state == "rejoining"
    assert device.probe(GOOD) == [DeviceRejoined(GPU1, "Xid 79 (GPU has fallen off the bus)", 30.0)]
    assert device.state == "healthy"


def test_an_application_xid_fails_the_subtasks_and_the_device_stays(clock: Clock) -> None:
    device = health(clock)
    assert device.fault(xid_fault(13)) == [ApplicationFault(GPU1, "Xid 13 (Graphics Engine Exception)", 13)]
    assert device.state == "healthy"
    assert "an application error (the device stays in service)" in ApplicationFault(GPU1, "Xid 13", 13).describe()


def test_an_informational_xid_is_only_recorded(clock: Clock) -> None:
    device = health(clock)
    assert device.fault(xid_fault(63)) == [] and device.state == "healthy"
    snapshot = device.snapshot()
    assert snapshot["xid_counts"] == {63: 1}
    assert snapshot["history"] == [{"at": 1000.0, "reason": "Xid 63 (GPU memory remapping event)",
                                    "kind": "informational", "xid": 63}]


def test_an_unreachable_device_rejoins_when_it_comes_back(clock: Clock) -> None:
    device = health(clock)
    assert kinds(device.probe(ProbeResult(reachable=False, detail="GPU is lost"))) == ["DeviceQuarantined"]
    assert device.snapshot()["reason"] == "unreachable: GPU is lost"
    assert device.probe(ProbeResult(reachable=False)) == []  # still lost: no new event
    device.probe(GOOD)  # back on the bus: a reset happened
    assert kinds(device.probe(GOOD)) == ["DeviceRejoined"]


def test_pending_retirement_drains_the_device_and_its_reset_lets_it_rejoin(clock: Clock) -> None:
    device = health(clock)
    (event,) = device.probe(ProbeResult(reachable=True, remapped_rows_pending=True))
    assert (event.fail_subtasks, event.needs_reset) == (False, True)  # running subtasks finish
    assert device.probe(ProbeResult(reachable=True, remapped_rows_pending=True)) == []
    assert device.probe(ProbeResult(reachable=True, remapped_rows_pending=False)) == []  # reset seen
    assert kinds(device.probe(GOOD)) == ["DeviceRejoined"]


def test_a_hot_device_takes_no_new_work_until_it_cools_down(clock: Clock) -> None:
    device = health(clock, temperature_limit=85.0, max_faults=1)
    (event,) = device.probe(ProbeResult(reachable=True, temperature=91))
    assert event.reason == "temperature 91 C over the limit of 85 C"
    assert (event.fail_subtasks, event.needs_reset, event.permanent) == (False, False, False)
    device.probe(GOOD)
    assert kinds(device.probe(GOOD)) == ["DeviceRejoined"]
    assert kinds(device.probe(ProbeResult(reachable=True, temperature=99))) == ["DeviceQuarantined"]
    assert device.snapshot()["permanent"] is False  # a hot spell is no fault of the card
    assert health(clock, temperature_limit=None).probe(ProbeResult(reachable=True, temperature=120)) == []


def test_unknown_probe_values_are_neither_good_nor_bad(clock: Clock) -> None:
    device = health(clock)
    assert device.probe(ProbeResult()) == [] and device.state == "healthy"
    device.fault(DOUBLE_BIT_ECC)
    device.reset()
    for _ in range(3):
        assert device.probe(ProbeResult(detail="nvidia-smi did not answer within 10 s")) == []
    assert device.state == "quarantined"
    device.probe(GOOD)
    assert kinds(device.probe(GOOD)) == ["DeviceRejoined"]


def test_a_worse_fault_while_draining_fails_the_subtasks(clock: Clock) -> None:
    device = health(clock)
    device.probe(ProbeResult(reachable=True, retired_pages_pending=True))
    (event,) = device.fault(xid_fault(48))
    assert (event.fail_subtasks, event.reason, event.since) == (True, "Xid 48 (Double Bit ECC Error)", 1000.0)


def test_a_burst_of_xids_from_one_failure_counts_once(clock: Clock) -> None:
    device = health(clock, max_faults=2)
    assert kinds(device.fault(xid_fault(48))) == ["DeviceQuarantined"]
    for _ in range(5):
        assert device.fault(xid_fault(48)) == []
    assert device.snapshot()["permanent"] is False and device.xid_counts[48] == 6


def test_max_faults_within_the_window_keep_the_device_out(clock: Clock) -> None:
    device = health(clock, max_faults=3, fault_window=3600.0, rejoin_probes=1)

    def fail_and_recover() -> list[Any]:
        events = device.fault(xid_fault(79))
        device.reset()
        return events + device.probe(GOOD)

    assert kinds(fail_and_recover()) == ["DeviceQuarantined", "DeviceRejoined"]
    clock.now += 3601  # the first fault leaves the window
    assert kinds(fail_and_recover()) == ["DeviceQuarantined", "DeviceRejoined"]
    clock.now += 10
    assert kinds(fail_and_recover()) == ["DeviceQuarantined", "DeviceRejoined"]
    clock.now += 10
    (event,) = fail_and_recover()
    assert event.permanent and "3 faults within 3600 s: it stays out until its TaskExecutor restarts" in event.reason
    device.reset()
    assert device.probe(GOOD) == [] and device.state == "quarantined"


def test_a_fault_after_a_reset_counts_again(clock: Clock) -> None:
    device = health(clock, max_faults=2)
    device.fault(xid_fault(79))
    device.reset()
    device.probe(GOOD)  # rejoining
    assert kinds(device.fault(xid_fault(79))) == ["DeviceQuarantined"]
    assert device.snapshot()["permanent"] is True


# -- param.health.* ----------------------------------------------------------------------------
def test_health_params_are_split_off_the_drivers() -> None:
    config, rest = split_health_params({
        "health.enabled": "false", "health.probe-interval": "500 ms", "health.temperature-limit": "80 C",
        "health.rejoin-probes": "5", "health.max-faults": "2", "health.fault-window": "10 min",
        "coordination": "false",
    })
    assert config == HealthConfig(enabled=False, probe_interval=0.5, temperature_limit=80.0, rejoin_probes=5,
                                  max_faults=2, fault_window=600.0)
    assert rest == {"coordination": "false"}
    assert split_health_params({})[0] == HealthConfig()
    assert split_health_params({"health.temperature-limit": "none"})[0].temperature_limit is None


def test_every_wrong_health_param_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        split_health_params({
            "health.probe-intervall": "1 s", "health.temperature-limit": "hot", "health.rejoin-probes": "0",
            "health.max-faults": "2.5", "health.enabled": "maybe", "health.probe-interval": "2 h",
        })
    problems = {p.key: p.message for p in info.value.problems}
    assert problems["param.health.probe-intervall"].startswith(
        "unknown health parameter; did you mean param.health.probe-interval?")
    assert "expected degrees Celsius such as '90' or 'none', got 'hot'" in problems["param.health.temperature-limit"]
    assert "from 1 to 1000, got '0'" in problems["param.health.rejoin-probes"]
    assert "got '2.5'" in problems["param.health.max-faults"]
    assert "expected true or false" in problems["param.health.enabled"]
    assert "expected 100 ms to 1 h, got '2 h'" in problems["param.health.probe-interval"]


def test_a_fault_window_shorter_than_the_probe_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="param.health.fault-window: 5 s is shorter than param.health.probe-interval"):
        split_health_params({"health.fault-window": "5 s", "health.probe-interval": "10 s"})


def test_a_fault_outside_the_kinds_is_just_recorded(clock: Clock) -> None:
    device = health(clock)
    assert device.fault(Fault("a note", "informational")) == []
    assert device.snapshot()["xid_counts"] == {}
