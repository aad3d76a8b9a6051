"""NVML discovery, through a fake ``pynvml`` module (there is no GPU here; this is the one place
where a module object stands in for a library, shaped like nvidia-ml-py's API)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from accelflow import DiscoveryError
from accelflow.resources.gpu import GPU_DISCOVERY_ENV_VAR, discover_gpus
from accelflow.resources.gpu._nvml import NvmlUnavailable, open_nvml, query_gpus

from .conftest import FakeGPUs

MIB = 1024 * 1024


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(f"NVML error {value}")


@dataclass
class FakeDevice:
    uuid: str
    name: str
    memory_mib: int
    bus_id: str = "00000000:17:00.0"
    mig: bool | None = False  # None: GetMigMode is not supported
    units: list[FakeDevice | None] = field(default_factory=list)  # None: an empty MIG slot


class FakeNvml(types.ModuleType):
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_UNKNOWN = 999
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_DEVICE_MIG_DISABLE = 0
    NVMLError = NVMLError

    def __init__(
        self, devices: list[FakeDevice], *, init_error: int | None = None, as_bytes: bool = False
    ) -> None:
        super().__init__("pynvml")
        self.devices = devices
        self.init_error = init_error
        self.as_bytes = as_bytes
        self.initialised = False
        self.inits = 0
        self.shutdowns = 0
        self.fail_on: str | None = None

    def _text(self, text: str) -> Any:
        return text.encode() if self.as_bytes else text

    def _check(self, call: str) -> None:
        if not self.initialised:
            raise NVMLError(1)
        if self.fail_on == call:
            raise NVMLError(self.NVML_ERROR_UNKNOWN)

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check("count")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeDevice:
        self._check("handle")
        return self.devices[i]

    def nvmlDeviceGetUUID(self, h: FakeDevice) -> Any:
        self._check("uuid")
        return self._text(h.uuid)

    def nvmlDeviceGetName(self, h: FakeDevice) -> Any:
        return self._text(h.name)

    def nvmlDeviceGetMemoryInfo(self, h: FakeDevice) -> Any:
        return types.SimpleNamespace(total=h.memory_mib * MIB, free=0, used=0)

    def nvmlDeviceGetPciInfo(self, h: FakeDevice) -> Any:
        return types.SimpleNamespace(busId=self._text(h.bus_id))

    def nvmlDeviceGetMigMode(self, h: FakeDevice) -> list[int]:
        if h.mig is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        mode = self.NVML_DEVICE_MIG_ENABLE if h.mig else self.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeDevice) -> int:
        return len(h.units)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeDevice, slot: int) -> FakeDevice:
        unit = h.units[slot]
        if unit is None:
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        return unit


def a100(i: int, **kwargs: Any) -> FakeDevice:
    return FakeDevice(
        uuid=f"GPU-a100-{i}",
        name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        bus_id=f"00000000:{i:02X}:00.0",
        **kwargs,
    )


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Put a fake ``pynvml`` in place and ask for NVML first, said explicitly (these tests mean
    this fake, and ``ACCELFLOW_GPU_DISCOVERY=nvidia-smi`` would skip it)."""

    def put(nvml: FakeNvml) -> FakeNvml:
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        monkeypatch.setenv(GPU_DISCOVERY_ENV_VAR, "auto")
        return nvml

    return put


def test_without_nvidia_ml_py_nvml_is_unavailable_and_says_what_to_install() -> None:
    with pytest.raises(NvmlUnavailable, match=r"pip install 'accelflow\[nvml\]'"):
        with open_nvml():
            pass


def test_devices_and_their_properties(install: Any) -> None:
    nvml = install(FakeNvml([a100(0), a100(1, mig=None)]))
    with open_nvml() as module:
        devices = query_gpus(module)
    assert nvml.shutdowns == 1
    assert [d.to_info().to_dict() for d in devices] == [
        {
            "index": "0",
            "uuid": "GPU-a100-0",
            "name": "NVIDIA A100-SXM4-40GB",
            "memory_total": "40960",
            "pci_bus_id": "00000000:00:00.0",
        },
        {
            "index": "1",
            "uuid": "GPU-a100-1",
            "name": "NVIDIA A100-SXM4-40GB",
            "memory_total": "40960",
            "pci_bus_id": "00000000:01:00.0",
        },
    ]


def test_bytes_from_older_nvidia_ml_py_are_decoded(install: Any) -> None:
    install(FakeNvml([a100(0)], as_bytes=True))
    with open_nvml() as module:
        assert query_gpus(module)[0].uuid == "GPU-a100-0"


def test_mig_units_are_listed_instead_of_their_gpu(install: Any) -> None:
    units: list[FakeDevice | None] = [
        FakeDevice(uuid="MIG-u0", name="NVIDIA A100-SXM4-40GB MIG 1g.5gb", memory_mib=4864),
        None,  # an empty slot is skipped
        FakeDevice(uuid="MIG-u2", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", memory_mib=19968),
    ]
    install(FakeNvml([a100(0, mig=True, units=units), a100(1)]))
    devices = discover_gpus({})
    assert [(d.index, d.uuid, d.mig_profile, d.memory_total_mib) for d in devices] == [
        ("0:0", "MIG-u0", "1g.5gb", 4864),
        ("0:1", "MIG-u2", "3g.20gb", 19968),
        ("1", "GPU-a100-1", None, 40960),
    ]
    assert devices[1].to_info()["parent_uuid"] == "GPU-a100-0"
    assert devices[1].to_info()["parent_index"] == "0"
    assert [d.index for d in discover_gpus({"CUDA_VISIBLE_DEVICES": "MIG-u2,1"})] == ["0:1", "1"]


def test_a_failing_query_is_an_error_and_nvml_is_still_shut_down(install: Any) -> None:
    nvml = install(FakeNvml([a100(0)]))
    nvml.fail_on = "uuid"
    with pytest.raises(DiscoveryError, match="an NVML query failed: NVML error 999"):
        discover_gpus({})
    assert nvml.shutdowns == 1 and not nvml.initialised


def test_nvml_that_cannot_load_falls_back_to_nvidia_smi(install: Any, fake_gpus: FakeGPUs) -> None:
    fake_gpus(3)
    nvml = install(FakeNvml([a100(0)], init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert [d.uuid for d in discover_gpus({})] == [
        "GPU-00000000-0000-4000-8000-000000000000",
        "GPU-00000000-0000-4000-8000-000000000001",
        "GPU-00000000-0000-4000-8000-000000000002",
    ]
    assert (nvml.inits, nvml.shutdowns) == (1, 0)  # NVML was asked first, then nvidia-smi


def test_neither_nvml_nor_nvidia_smi_says_how_to_fix_it(install: Any, no_nvidia_smi: None) -> None:
    install(FakeNvml([], init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(DiscoveryError) as info:
        discover_gpus({})
    message = str(info.value)
    assert "NVML could not be initialised: NVML error 12" in message
    assert "nvidia-smi is not on PATH" in message
    assert "discovery-script.path" in message and "accelflow[nvml]" in message
