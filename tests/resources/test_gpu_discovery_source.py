"""Fakes win on a machine with a real GPU (issue 12.9), and real-GPU tests run only there.

A "real GPU machine" is simulated with an ``nvidia-ml-py``-like ``pynvml`` module on the
subprocess's ``PYTHONPATH`` that reports an H100 the fake ``nvidia-smi`` does not have, and a
``CUDA_VISIBLE_DEVICES`` pinned by the host. A fake GPU environment from
:mod:`accelflow.testing` must still get exactly the fake GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow import ConfigError
from accelflow.resources.gpu import GPU_DISCOVERY_ENV_VAR
from accelflow.resources.gpu._params import discovery_source
from accelflow.testing import (
    NO_GPU,
    fake_nvidia_smi_env,
    has_real_gpu,
    install_fake_nvidia_smi,
    use_fake_nvidia_smi,
)
from accelflow.testing._nvidia_smi import fake_gpu_uuid

REAL_UUID = "GPU-7e57a100-0000-0000-0000-00000000h100"

FAKE_PYNVML = f'''
"""nvidia-ml-py as a host with one real H100 has it."""
class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_FOUND = 3, 13, 6
NVML_DEVICE_MIG_ENABLE = 1
class _Memory:
    total = 80 * 1024 ** 3
class _Pci:
    busId = "00000000:9A:00.0"
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetUUID(h): return "{REAL_UUID}"
def nvmlDeviceGetName(h): return "NVIDIA H100 80GB HBM3"
def nvmlDeviceGetMemoryInfo(h): return _Memory()
def nvmlDeviceGetPciInfo(h): return _Pci()
def nvmlDeviceGetMigMode(h): raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
'''

GPU_CONFIG = [
    "-D", "external-resources=gpu",
    "-D", "external-resource.gpu.amount=1",
    "-D", "external-resource.gpu.driver-factory.class=gpu",
    "-D", "external-resource.gpu.param.coordination=false",
    "--json",
]


@pytest.fixture
def gpu_machine_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a host with a real GPU: NVML loads and CUDA_VISIBLE_DEVICES is set."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pynvml.py").write_text(FAKE_PYNVML)
    env = {k: v for k, v in os.environ.items() if k not in ("ACCELFLOW_CONF", GPU_DISCOVERY_ENV_VAR)}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *[p for p in sys.path if p]])
    env["CUDA_VISIBLE_DEVICES"] = "0"
    return env


def discovered(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "accelflow", "resources", *GPU_CONFIG],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    (gpu,) = json.loads(done.stdout)["resources"]
    return [info["uuid"] for info in gpu["infos"]]


def test_the_simulated_machine_has_a_real_gpu_that_wins_over_a_bare_path(
    gpu_machine_env: dict[str, str], tmp_path: Path
) -> None:
    """The control: only PATH pointing at the fake (the old way) loses to NVML."""
    exe = install_fake_nvidia_smi(tmp_path / "bin", 2)
    gpu_machine_env["PATH"] = f"{exe.parent}{os.pathsep}{gpu_machine_env['PATH']}"

    assert discovered(gpu_machine_env) == [REAL_UUID]


def test_a_fake_gpu_environment_gets_the_fake_whatever_the_machine_has(
    gpu_machine_env: dict[str, str], tmp_path: Path
) -> None:
    install_fake_nvidia_smi(tmp_path / "bin", 2, environ=gpu_machine_env)

    assert gpu_machine_env[GPU_DISCOVERY_ENV_VAR] == "nvidia-smi"
    assert "CUDA_VISIBLE_DEVICES" not in gpu_machine_env
    assert discovered(gpu_machine_env) == [fake_gpu_uuid(0)]


def test_use_fake_nvidia_smi_patches_this_process_and_its_children(
    gpu_machine_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in gpu_machine_env.items():
        monkeypatch.setenv(name, value)

    exe = use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 2)

    assert os.environ["PATH"].split(os.pathsep)[0] == str(exe.parent)
    assert discovered(dict(os.environ)) == [fake_gpu_uuid(0)]


def test_nvml_can_be_pinned_too(gpu_machine_env: dict[str, str], tmp_path: Path) -> None:
    exe = install_fake_nvidia_smi(tmp_path / "bin", 2)
    env = dict(gpu_machine_env, **{GPU_DISCOVERY_ENV_VAR: "nvml"})
    env["PATH"] = f"{exe.parent}{os.pathsep}{env['PATH']}"

    assert discovered(env) == [REAL_UUID]


def test_the_environment_changes_are_idempotent() -> None:
    changes = fake_nvidia_smi_env("/t/bin/nvidia-smi", {"PATH": "/t/bin:/usr/bin", "CUDA_VISIBLE_DEVICES": "1"})
    assert changes == {
        "PATH": "/t/bin:/usr/bin",
        GPU_DISCOVERY_ENV_VAR: "nvidia-smi",
        "CUDA_VISIBLE_DEVICES": None,
        "CUDA_DEVICE_ORDER": None,
    }


@pytest.mark.parametrize("value", ["maybe", "smi"])
def test_a_bad_discovery_source_names_the_variable(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        discovery_source({GPU_DISCOVERY_ENV_VAR: value})
    assert info.value.keys == (GPU_DISCOVERY_ENV_VAR,)
    assert "auto, nvml, nvidia-smi" in str(info.value)


def test_a_fake_nvidia_smi_is_never_taken_for_a_real_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 2)
    # asked afresh (uncached), leaving the suite's answer (conftest.py asks once) as it was
    assert has_real_gpu.__wrapped__() is False


# -- on a machine with a real GPU ----------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not has_real_gpu(), reason=NO_GPU)
def test_the_real_gpus_are_discovered_by_nvml_and_nvidia_smi_alike() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ACCELFLOW_CONF", "CUDA_VISIBLE_DEVICES")}
    by_smi = discovered(dict(env, **{GPU_DISCOVERY_ENV_VAR: "nvidia-smi"}))
    auto = discovered(dict(env, **{GPU_DISCOVERY_ENV_VAR: "auto"}))

    assert by_smi and all(uuid.startswith(("GPU-", "MIG-")) for uuid in by_smi)
    assert auto == by_smi  # NVML (when nvidia-ml-py is installed) agrees with nvidia-smi
