"""Fixtures of the GPU plugin tests: a fake nvidia-smi first on PATH, no NVML, clean env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from accelflow.resources.gpu import Allocation, CoordinationFile, GPUDevice, Owner
from accelflow.testing import FakeGPU, use_fake_nvidia_smi

HERE = Path(__file__).parent
OWNER_PROCESS = HERE / "owner_process.py"

FakeGPUs = Callable[..., Path]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NVML (so the nvidia-smi path is used), no inherited GPU env, no ACCELFLOW_HOME,
    and a private temp dir so the default coordination file never touches the real one."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for name in ("CUDA_VISIBLE_DEVICES", "ACCELFLOW_HOME"):
        monkeypatch.delenv(name, raising=False)
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", str(temp))


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGPUs:
    """``fake_gpus(4)`` or ``fake_gpus([FakeGPU(...)], exit_code=9, stderr="...")`` installs the
    fake nvidia-smi in ``tmp_path/bin`` and makes it the only GPU source of this process and its
    children (first on PATH, ``ACCELFLOW_GPU_DISCOVERY=nvidia-smi``, no ``CUDA_VISIBLE_DEVICES``:
    the fake wins on a host with real GPUs too, issue 12.9); returns its path. Calling it again
    changes what the fake reports (and unsets ``CUDA_VISIBLE_DEVICES`` again)."""

    def install(gpus: int | Sequence[FakeGPU], *, exit_code: int = 0, stderr: str = "") -> Path:
        return use_fake_nvidia_smi(
            monkeypatch, tmp_path / "bin", gpus, exit_code=exit_code, stderr=stderr
        )

    return install


@pytest.fixture
def no_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH on which no nvidia-smi can be found (but python and sh still run): /usr/bin and
    /bin, or where the real nvidia-smi is in one of them (a GPU host), a folder of links to
    everything there but nvidia-smi."""
    bin_dir = tmp_path / "empty-bin"
    bin_dir.mkdir()
    path, seen = [bin_dir], set()
    for folder in (Path("/usr/bin"), Path("/bin")):
        if folder.resolve() in seen:  # /bin -> /usr/bin where /usr is merged
            continue
        seen.add(folder.resolve())
        if (folder / "nvidia-smi").exists():
            shadow = tmp_path / f"no-nvidia-smi{len(path)}"
            shadow.mkdir()
            for entry in os.scandir(folder):
                if entry.name != "nvidia-smi":
                    (shadow / entry.name).symlink_to(entry.path)
            folder = shadow
        path.append(folder)
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, path)))


@pytest.fixture
def coordination_file(tmp_path: Path) -> Path:
    return tmp_path / "coord" / "gpu-coordination.json"


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def live_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process other than the test process (killed afterwards)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def plant(path: Path, devices: list[GPUDevice], owner: Owner) -> list[GPUDevice]:
    """Record ``devices`` for ``owner`` by writing the file, as an owner that allocated and
    then died (or a record from another host) leaves it: ``allocate`` refuses dead owners."""
    records = CoordinationFile(path).allocations() if path.exists() else []
    fresh = [
        Allocation(index=d.index, uuid=d.uuid, owner=owner, allocated_at="2024-05-01T12:00:00")
        for d in devices
    ]
    document = {
        "format": "accelflow-gpu-coordination",
        "version": 1,
        "allocations": [r.to_json() for r in [*records, *fresh]],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return devices
