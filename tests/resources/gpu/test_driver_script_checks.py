"""Script mode checks the script's indexes against the GPUs NVML/nvidia-smi list."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelflow import DiscoveryError
from accelflow.resources.gpu import GPUDriverFactory
from accelflow.testing._nvidia_smi import FakeGPU, FakeMIGDevice, fake_gpu_uuid

from .conftest import FakeGPUs
from .test_script import write_script


def retrieve(script: Path, amount: int) -> list[dict[str, str]]:
    driver = GPUDriverFactory().create_external_resource_driver(
        {"discovery-script.path": str(script)}
    )
    return [i.to_dict() for i in sorted(driver.retrieve_resource_info(amount))]


@pytest.mark.parametrize("printed", ["1" * 38, "5", "0,7"])
def test_an_index_the_host_does_not_have_is_refused(
    fake_gpus: FakeGPUs, tmp_path: Path, printed: str
) -> None:
    fake_gpus(2)
    script = write_script(tmp_path / "lies.sh", f"echo {printed}")
    amount = len(printed.split(","))
    if len(printed) > 6:  # too long to be an index at all
        with pytest.raises(DiscoveryError, match="not a GPU index"):
            retrieve(script, amount)
        return
    with pytest.raises(DiscoveryError, match="that this host does not have") as info:
        retrieve(script, amount)
    assert "list ['0', '1']" in str(info.value) and str(script) in str(info.value)


def test_leading_zeros_are_normalised_before_matching(fake_gpus: FakeGPUs, tmp_path: Path) -> None:
    fake_gpus(2)
    script = write_script(tmp_path / "padded.sh", "echo 00,01")
    infos = retrieve(script, 2)
    assert [(i["index"], i["uuid"]) for i in infos] == [("0", fake_gpu_uuid(0)), ("1", fake_gpu_uuid(1))]


def test_a_mig_gpu_and_its_units_count_as_known(fake_gpus: FakeGPUs, tmp_path: Path) -> None:
    fake_gpus([FakeGPU(index=0, mig_devices=(FakeMIGDevice(uuid="MIG-a"),)), FakeGPU(index=1)])
    assert [i["index"] for i in retrieve(write_script(tmp_path / "a.sh", "echo 0,1"), 2)] == [
        "0",
        "1",
    ]
    assert retrieve(write_script(tmp_path / "b.sh", "echo 0:0"), 1)[0]["uuid"] == "MIG-a"


def test_without_nvml_or_nvidia_smi_the_indexes_are_taken_as_printed(
    no_nvidia_smi: None, tmp_path: Path
) -> None:
    assert retrieve(write_script(tmp_path / "amd.sh", "echo 5"), 1) == [{"index": "5"}]
