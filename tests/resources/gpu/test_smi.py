"""nvidia-smi discovery, against the fake nvidia-smi on PATH."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from accelflow import DiscoveryError
from accelflow.resources.gpu import GPUDevice
from accelflow.resources.gpu._smi import (
    expand_mig_units,
    find_nvidia_smi,
    parse_query_output,
    query_gpus,
)
from accelflow.testing._nvidia_smi import FakeGPU, FakeMIGDevice, fake_gpu_uuid

from .conftest import FakeGPUs

REAL_L_OUTPUT = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 1g.5gb      Device  1: (UUID: MIG-cba663e8-9bed-5b7b-b3b3-61b0ffc5b5e8)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-7a9c7f4b-4fcd-7c02-1a4c-4d4e3e7e9e11)
"""


def test_the_fake_answers_the_query_as_nvidia_smi_does(fake_gpus: FakeGPUs) -> None:
    smi = fake_gpus([FakeGPU(index=0, name="NVIDIA H100 80GB HBM3", memory_total=81559)])
    devices = query_gpus(str(smi))
    assert devices == [
        GPUDevice(
            index="0",
            uuid=fake_gpu_uuid(0),
            name="NVIDIA H100 80GB HBM3",
            memory_total_mib=81559,
            pci_bus_id="00000000:10:00.0",
        )
    ]
    calls = [
        json.loads(line) for line in (smi.parent / "nvidia-smi.calls").read_text().splitlines()
    ]
    assert calls[0] == [
        "--query-gpu=index,uuid,name,memory.total,pci.bus_id",
        "--format=csv,noheader,nounits",
    ]


def test_find_nvidia_smi_uses_path(fake_gpus: FakeGPUs) -> None:
    smi = fake_gpus(1)
    assert find_nvidia_smi() == str(smi)


def test_no_devices_is_an_empty_list(fake_gpus: FakeGPUs) -> None:
    assert query_gpus(str(fake_gpus(0))) == []


def test_a_failing_nvidia_smi_is_a_discovery_error_with_its_message(fake_gpus: FakeGPUs) -> None:
    smi = fake_gpus(
        2,
        exit_code=9,
        stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    )
    with pytest.raises(DiscoveryError, match="failed with exit code 9: NVIDIA-SMI has failed"):
        query_gpus(str(smi))


def test_a_hanging_nvidia_smi_times_out(tmp_path: Path) -> None:
    hang = tmp_path / "nvidia-smi"
    hang.write_text(f"#!{sys.executable}\nimport time; time.sleep(60)\n")
    hang.chmod(0o755)
    with pytest.raises(DiscoveryError, match="did not answer within 0.5 s"):
        query_gpus(str(hang), timeout=0.5)


def test_mig_units_replace_their_gpu(fake_gpus: FakeGPUs) -> None:
    smi = fake_gpus(
        [
            FakeGPU(index=0),
            FakeGPU(
                index=1,
                mig_devices=(
                    FakeMIGDevice(uuid="MIG-a"),
                    FakeMIGDevice(uuid="MIG-b", profile="3g.40gb"),
                ),
            ),
        ]
    )
    devices = query_gpus(str(smi))
    assert [d.index for d in devices] == ["0", "1:0", "1:1"]
    unit = devices[2]
    assert (unit.uuid, unit.parent_index, unit.parent_uuid, unit.mig_profile) == (
        "MIG-b",
        "1",
        fake_gpu_uuid(1),
        "3g.40gb",
    )
    assert unit.to_info()["parent_uuid"] == fake_gpu_uuid(1)


def test_mig_parsing_of_real_output() -> None:
    gpus = [
        GPUDevice(index="0", uuid="GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"),
        GPUDevice(index="1"),
    ]
    devices = expand_mig_units(gpus, REAL_L_OUTPUT)
    assert [(d.index, d.uuid, d.mig_profile) for d in devices] == [
        ("0:0", "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "1g.5gb"),
        ("0:1", "MIG-cba663e8-9bed-5b7b-b3b3-61b0ffc5b5e8", "1g.5gb"),
        ("1", None, None),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "0, GPU-1, Tesla T4, 15360, 00000000:00:1E.0",
            GPUDevice(
                index="0",
                uuid="GPU-1",
                name="Tesla T4",
                memory_total_mib=15360,
                pci_bus_id="00000000:00:1E.0",
            ),
        ),
        (
            "3, GPU-3, Tesla T4, 15360 MiB, 00000000:00:1E.0",
            GPUDevice(
                index="3",
                uuid="GPU-3",
                name="Tesla T4",
                memory_total_mib=15360,
                pci_bus_id="00000000:00:1E.0",
            ),
        ),
        ("1, [N/A], Tesla T4, [N/A], [N/A]", GPUDevice(index="1", name="Tesla T4")),
    ],
)
def test_query_line_forms(line: str, expected: GPUDevice) -> None:
    assert parse_query_output(line + "\n\n") == [expected]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("0, GPU-1, Tesla T4", "3 fields where 5"),
        ("x, GPU-1, Tesla T4, 1, 00000000:00:1E.0", "not a number"),
    ],
)
def test_unparseable_query_output(output: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message):
        parse_query_output(output)
