"""Issue 26.4: devices cross processes as typed messages (``RegisteredResource``,
``RegisteredDevice``, ``DeviceShare``), and a resource counted by amount only (no driver, or a
degraded one) is booked on stand-ins that one helper makes and recognises
(``scheduling.counted_address`` / ``is_counted``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import accelflow
from accelflow import Environment
from accelflow.runtime import RegisteredDevice, RegisteredResource, Registration
from accelflow.runtime.jobmanager._state import devices_of
from accelflow.scheduling import DeviceKey, counted_address, is_counted
from runtime_jobs import FpgaProbe, JsonLinesSink


def test_a_taskexecutor_registers_typed_devices_and_a_subtask_gets_exact_shares(
    fpga_conf: dict[str, Any], tmp_path: Path
) -> None:
    conf = dict(fpga_conf, **{"external-resources": "fpga;tpu", "external-resource.tpu.amount": 2,
                              "local.number-taskmanager": 1})
    (tmp_path / "out").mkdir()
    records = JsonLinesSink(str(tmp_path / "out"))
    env = Environment(conf)
    env.from_sequence(0, 1).map(FpgaProbe, name="probe", resources={"fpga": 0.5, "tpu": 0.5}).add_sink(records)
    client = env.execute_async()
    result = client.wait(60)

    registration = client.jobmanager.taskexecutors["taskexecutor-1"].registration
    assert registration.resources == (
        RegisteredResource("fpga", 2, "accelflow.testing:StaticDriverFactory", "ok", None,
                           (RegisteredDevice("0", {"index": "0"}), RegisteredDevice("1", {"index": "1"}))),
        RegisteredResource("tpu", 2, None, "no-driver"),
    )
    seen = records.read()
    assert [(s["record"], s["shares"], s["FPGA_VISIBLE_DEVICES"]) for s in seen] == [
        (0, [["0", "1/2"]], "0"), (1, [["0", "1/2"]], "0")]
    assert result.devices == {
        "probe (1/1)": "taskexecutor-1 fpga 0 (0.5), tpu (no device: counted only) (0.5)",
    }


def test_a_counted_resource_is_booked_on_stand_ins() -> None:
    registration = Registration("te-1", 1, 1, (
        RegisteredResource("fpga", 1, "fpga", devices=(RegisteredDevice("7", {"index": "7"}),)),
        RegisteredResource("tpu", 2, "tpu", "degraded", "discovery of 'tpu' failed"),
    ))
    keys = devices_of(registration)
    assert keys == [DeviceKey("te-1", "fpga", "7"), DeviceKey("te-1", "tpu", counted_address(0)),
                    DeviceKey("te-1", "tpu", counted_address(1))]
    assert [k.counted for k in keys] == [False, True, True]
    assert registration.resource("tpu").counted and not registration.resource("fpga").counted
    assert not is_counted(counted_address(0)[1:]) and counted_address(0) != counted_address(1)


def test_only_the_helper_spells_a_counted_address() -> None:
    """No module makes or tests the stand-in address by hand (``f"#{i}"``, ``startswith("#")``)."""
    src = Path(accelflow.__file__).parent
    by_hand = re.compile(r"""startswith\(\s*["']#|f["']#\{""")
    found = [str(p.relative_to(src)) for p in sorted(src.rglob("*.py"))
             if by_hand.search(p.read_text(encoding="utf-8"))]
    assert found == []
