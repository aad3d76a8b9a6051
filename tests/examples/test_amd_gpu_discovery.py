"""examples/amd_gpu_discovery.py against fake ``amd-smi`` / ``rocm-smi`` executables on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.resources.gpu import OWNER_ENV_VAR, CoordinationFile, GPUDriverFactory, Owner
from accelflow.testing import use_fake_nvidia_smi

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "amd_gpu_discovery.py"

AMD_SMI_LIST = [
    {
        "gpu": i,
        "bdf": f"0000:{0x0C + i:02x}:00.0",
        "uuid": f"7eff74a0-0000-1000-808f-7e20764e271{i}",
        "kfd_id": 1000 + i,
        "node_id": 2 + i,
        "partition_id": 0,
    }
    for i in range(4)
]
ROCM_SMI = {
    **{
        f"card{i}": {"Unique ID": f"0x{0xABC0 + i:x}", "PCI Bus": f"0000:{0x03 + i:02x}:00.0"}
        for i in range(3)
    },
    "system": {"Driver version": "6.7.0"},
}


def fake_tool(
    directory: Path, name: str, stdout: str, *, exit_code: int = 0, stderr: str = ""
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"sys.stdout.write({stdout!r}); sys.stderr.write({stderr!r}); sys.exit({exit_code})\n"
    )
    path.chmod(0o755)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only the fake tools, this Python (as python3) and the basic system dirs,
    and an NVIDIA side that lists no GPU (a fake nvidia-smi with none, first on PATH), so the
    GPU driver takes the AMD indexes as they are even on a host with NVIDIA GPUs."""
    directory = tmp_path / "tools"
    directory.mkdir()
    path = os.pathsep.join([str(directory), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    monkeypatch.setenv("PATH", path)
    for name in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ACCELFLOW_HOME", OWNER_ENV_VAR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    use_fake_nvidia_smi(monkeypatch, tmp_path / "no-nvidia", 0)
    return directory


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_the_example_is_an_executable_script() -> None:
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")


def test_amd_smi_is_used_first(tools: Path) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    fake_tool(tools, "rocm-smi", "", exit_code=99)
    done = run("3")
    assert (done.returncode, done.stdout, done.stderr) == (0, "0,1,2\n", "")


def test_rocm_smi_is_the_fallback(tools: Path) -> None:
    fake_tool(tools, "rocm-smi", json.dumps(ROCM_SMI))
    assert run("2").stdout == "0,1\n"
    fake_tool(tools, "amd-smi", "", exit_code=1, stderr="amdsmi_init failed")
    assert run("3").stdout == "0,1,2\n"


def test_tool_choice(tools: Path) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    fake_tool(tools, "rocm-smi", json.dumps({"card7": {}}))
    assert run("1", "--tool", "rocm-smi").stdout == "7\n"


def test_too_few_gpus_exit_1(tools: Path) -> None:
    fake_tool(tools, "rocm-smi", json.dumps(ROCM_SMI))
    done = run("4")
    assert done.returncode == 1 and done.stdout == ""
    assert "need 4 AMD GPU(s), found 3" in done.stderr


def test_no_tool_names_both(tools: Path) -> None:
    done = run("1")
    assert done.returncode == 1
    assert "amd-smi is not on PATH" in done.stderr and "rocm-smi is not on PATH" in done.stderr


def test_a_failing_tool_is_reported(tools: Path) -> None:
    fake_tool(tools, "amd-smi", "", exit_code=3, stderr="no AMD GPU driver")
    fake_tool(tools, "rocm-smi", "not json")
    done = run("1")
    assert done.returncode == 1
    assert "amd-smi exited with 3: no AMD GPU driver" in done.stderr
    assert "rocm-smi printed something unexpected" in done.stderr


def test_amount_zero_and_usage_errors(tools: Path) -> None:
    assert (run("0").returncode, run("0").stdout) == (0, "")
    bad = run("1", "--bogus")
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr


def test_visible_devices_restrict(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", f"3,{AMD_SMI_LIST[1]['uuid']}")
    assert run("2").stdout == "3,1\n"
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    assert run("1").returncode == 1


def test_coordination_keeps_callers_apart(tools: Path, tmp_path: Path) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    file = tmp_path / "coordination.json"
    args = ("--enable-coordination-mode", "--coordination-file", str(file))
    assert [run("2", *args).stdout, run("2", *args).stdout] == ["0,1\n", "2,3\n"]
    refused = run("1", *args)
    assert refused.returncode == 1 and "need 1 GPU(s)" in refused.stderr
    records = CoordinationFile(file).allocations()
    assert {r.uuid for r in records} == {g["uuid"] for g in AMD_SMI_LIST}
    assert {r.owner.pid for r in records} == {os.getpid()}


def test_coordination_needs_host_coordination_only_not_the_gpu_plugin(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26.6: a driver of another vendor coordinates through
    ``accelflow.resources.coordination`` without importing the NVIDIA GPU plugin, and shares
    the GPU driver's file (same name and format)."""
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # stderr lists every module imported
    file = tmp_path / "gpu-coordination.json"
    done = run("2", "--enable-coordination-mode", "--coordination-file", str(file))
    assert (done.returncode, done.stdout) == (0, "0,1\n")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "accelflow.resources.coordination" in imported
    assert not [m for m in imported if m.startswith("accelflow.resources.gpu")]
    state = json.loads(file.read_text())
    assert state["format"] == "accelflow-gpu-coordination"
    assert [r["gpu"] for r in state["allocations"]] == [g["uuid"] for g in AMD_SMI_LIST[:2]]
    assert [r.index for r in CoordinationFile(file).allocations()] == ["0", "1"]


def test_the_owner_named_by_the_driver_wins_over_the_parent(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        monkeypatch.setenv(OWNER_ENV_VAR, Owner.of_process(sleeper.pid).to_env())
        file = tmp_path / "coordination.json"
        done = run("1", "--enable-coordination-mode", "--coordination-file", str(file))
        assert (done.returncode, done.stdout) == (0, "0\n")
        assert [r.owner.pid for r in CoordinationFile(file).allocations()] == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_owner_that_has_exited_is_refused(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv(OWNER_ENV_VAR, f"{gone.pid}:")
    file = tmp_path / "coordination.json"
    done = run("1", "--enable-coordination-mode", "--coordination-file", str(file))
    assert (done.returncode, done.stdout) == (1, "")
    assert f"{OWNER_ENV_VAR} names process {gone.pid}, which has exited" in done.stderr
    assert not file.exists() or CoordinationFile(file).allocations() == []


def test_behind_a_wrapper_the_driver_not_the_wrapper_owns_the_gpus(
    tools: Path, tmp_path: Path
) -> None:
    """Issue 16.2 for this example: a wrapper shell (no exec) exits at once; had it been
    recorded as the owner, the next caller would reclaim GPUs the TaskExecutor still uses."""
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    file = tmp_path / "coordination.json"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f'#!/bin/sh\n"{SCRIPT}" "$@"\n')
    wrapper.chmod(0o755)
    args = f"--enable-coordination-mode --coordination-file {file}"
    params = {"discovery-script.path": str(wrapper), "discovery-script.args": args}
    first = GPUDriverFactory().create_external_resource_driver(params)
    assert sorted(i["index"] for i in first.retrieve_resource_info(2)) == ["0", "1"]
    assert {r.owner.pid for r in CoordinationFile(file).allocations()} == {os.getpid()}
    second = GPUDriverFactory().create_external_resource_driver(params)
    assert sorted(i["index"] for i in second.retrieve_resource_info(2)) == ["2", "3"]


def test_as_the_gpu_drivers_discovery_script(tools: Path) -> None:
    fake_tool(tools, "amd-smi", json.dumps(AMD_SMI_LIST))
    driver = GPUDriverFactory().create_external_resource_driver(
        {"discovery-script.path": str(SCRIPT), "discovery-script.args": "--tool amd-smi"}
    )
    infos = driver.retrieve_resource_info(2)
    assert sorted(i["index"] for i in infos) == ["0", "1"]
    assert driver.isolation_env(infos)["CUDA_VISIBLE_DEVICES"] == "0,1"
