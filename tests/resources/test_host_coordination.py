"""Issue 26.6: host coordination is vendor-neutral. ``accelflow.resources.coordination`` keys the
coordination file by a resource name (``<resource>-coordination.json``, format
``accelflow-<resource>-coordination``) and records devices by UUID or index, so an FPGA or AMD
driver uses it without the GPU plugin, and GPU files stay what they always were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelflow import CoordinationError, DiscoveryError
from accelflow.resources import gpu
from accelflow.resources.coordination import (
    CoordinationFile,
    Device,
    Owner,
    default_coordination_path,
    owner_env_var,
    owner_from_env,
)


def fpgas(n: int) -> list[Device]:
    return [Device(index=str(i), uuid=f"xcl-{i}", kind="FPGA") for i in range(n)]


@pytest.fixture
def other_owner() -> Iterator[Owner]:
    """A live process other than this one (killed afterwards)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield Owner.of_process(process.pid)
    process.kill()
    process.wait()


def test_an_fpga_driver_keeps_owners_apart_in_its_own_file(tmp_path: Path, other_owner: Owner) -> None:
    ledger = CoordinationFile(tmp_path / "fpga-coordination.json", resource="fpga")
    me = Owner.of_process()
    assert [d.index for d in ledger.allocate(fpgas(3), 2, me)] == ["0", "1"]
    assert ledger.allocate(fpgas(3), 1, other_owner) == [fpgas(3)[2]]
    with pytest.raises(DiscoveryError) as refused:
        ledger.allocate(fpgas(3), 1, me)
    assert str(refused.value).startswith("need 1 FPGA(s) but only 0 of the 3 visible here are free")
    assert "FPGA 0 (xcl-0) held by pid" in str(refused.value)
    assert "Stop a TaskExecutor that holds FPGAs" in str(refused.value)

    state = json.loads(ledger.path.read_text())
    assert state["format"] == "accelflow-fpga-coordination" and state["version"] == 1
    assert [(r["fpga"], r["index"], r["owner"]["pid"]) for r in state["allocations"]] == [
        ("xcl-0", "0", os.getpid()), ("xcl-1", "1", os.getpid()), ("xcl-2", "2", other_owner.pid)]
    assert [r.index for r in ledger.release(fpgas(3), me)] == ["0", "1"]
    assert [(r.device_id, r.owner.pid) for r in ledger.allocations()] == [("xcl-2", other_owner.pid)]


def test_devices_without_uuid_are_keyed_by_index(tmp_path: Path) -> None:
    ledger = CoordinationFile(tmp_path / "npu.json", resource="npu")
    taken = ledger.allocate([Device(index="1"), Device(index="11")], 1, Owner.of_process())
    assert taken == [Device(index="1")]
    assert [r.device_id for r in ledger.allocations()] == ["index:1"]
    assert json.loads(ledger.path.read_text())["allocations"][0]["npu"] == "index:1"


def test_the_default_file_is_named_after_the_resource(tmp_path: Path) -> None:
    fpga = default_coordination_path("fpga", str(tmp_path))
    assert fpga == tmp_path / f"accelflow-{os.getuid()}" / "fpga-coordination.json"
    assert gpu.default_coordination_path(str(tmp_path)) == fpga.with_name("gpu-coordination.json")


def test_a_gpu_file_of_earlier_versions_still_reads(tmp_path: Path) -> None:
    """The GPU file keeps its name, format and fields (docs/gpu.md); records of any owner read."""
    me = Owner.of_process()
    path = tmp_path / "gpu-coordination.json"
    path.write_text(json.dumps({
        "format": "accelflow-gpu-coordination", "version": 1,
        "allocations": [{"gpu": "GPU-1", "index": "0", "uuid": "GPU-1",
                         "allocated_at": "2024-05-01T12:00:00+00:00", "owner": me.to_json()}],
    }))
    for ledger in (gpu.CoordinationFile(path), CoordinationFile(path, resource="gpu")):
        assert [(r.index, r.uuid, r.owner.pid) for r in ledger.allocations()] == [("0", "GPU-1", me.pid)]
    gpu.CoordinationFile(path).allocate([gpu.GPUDevice(index="1", uuid="GPU-2")], 1, me)
    written = json.loads(path.read_text())
    assert written["format"] == "accelflow-gpu-coordination"
    assert [sorted(r) for r in written["allocations"]] == [["allocated_at", "gpu", "index", "owner", "uuid"]] * 2


def test_another_resources_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    gpu.CoordinationFile(path).allocate([gpu.GPUDevice(index="0")], 1, Owner.of_process())
    before = path.read_bytes()
    with pytest.raises(CoordinationError) as info:
        CoordinationFile(path, resource="fpga").allocate(fpgas(1), 1, Owner.of_process())
    assert info.value.path == str(path)
    assert 'not an accelflow FPGA coordination file (no "format": "accelflow-fpga-coordination")' in str(info.value)
    assert "No FPGA is handed out" in str(info.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize(("resource", "why"), [
    ("", "must be a resource name"), ("gpu.fpga", "must be a resource name"), (None, "must be a resource name"),
    ("index", "its records have a field of that name"),
])
def test_a_resource_that_is_no_name_is_refused(tmp_path: Path, resource: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        CoordinationFile(tmp_path / "x.json", resource=resource)  # type: ignore[arg-type]


def test_the_owner_variable_is_named_after_the_resource() -> None:
    assert owner_env_var("fpga") == "ACCELFLOW_FPGA_OWNER" and gpu.OWNER_ENV_VAR == "ACCELFLOW_GPU_OWNER"
    assert owner_from_env(Owner.of_process().to_env(), "fpga").pid == os.getpid()
    with pytest.raises(ValueError, match="^ACCELFLOW_FPGA_OWNER='x': expected '<pid>:<start ticks>'"):
        owner_from_env("x", "fpga")


def test_a_driver_coordinates_without_importing_the_gpu_plugin(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from accelflow.resources.coordination import CoordinationFile, Device, Owner\n"
        f"ledger = CoordinationFile({str(tmp_path / 'f.json')!r}, resource='fpga')\n"
        "print(len(ledger.allocate([Device(index='0')], 1, Owner.of_process())))\n"
        "print(sorted(m for m in sys.modules if m.startswith('accelflow.resources.gpu')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout == "1\n[]\n"
