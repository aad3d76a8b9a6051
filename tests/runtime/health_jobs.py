"""User code of the device health tests (subtasks import this module by reference, so it stays
light: no pytest, no test modules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from accelflow import RichMapFunction, RuntimeContext


class Tagged(RichMapFunction[int, list[Any]]):
    """``[x, the GPU it runs on, the attempt]`` for each record ``x``."""

    def open(self, ctx: RuntimeContext) -> None:
        [gpu] = ctx.get_external_resource_infos("gpu")
        self.gpu, self.attempt = gpu.address, ctx.attempt_number

    def map(self, value: int) -> list[Any]:
        return [value, self.gpu, self.attempt]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class LeavesALeftover(RichMapFunction[int, int]):
    """Attempt 0 starts a process that computes on its GPU (the fake ``nvidia-smi`` in
    ``bin_dir`` lists it, with 6 GiB, while it lives) and fails; attempt 1 notes in
    ``folder/seen`` whether that process still ran when it opened on the same GPU."""

    def __init__(self, folder: str, bin_dir: str) -> None:
        self.folder, self.bin_dir = Path(folder), bin_dir

    def open(self, ctx: RuntimeContext) -> None:
        from accelflow.testing import FakeComputeApp, FakeGPU, install_fake_nvidia_smi

        [gpu] = ctx.get_external_resource_infos("gpu")
        self.attempt = ctx.attempt_number
        pid_file = self.folder / "leftover.pid"
        if self.attempt == 0:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            pid_file.write_text(str(child.pid))
            install_fake_nvidia_smi(self.bin_dir, [FakeGPU(index=0)], compute_apps=[FakeComputeApp(
                pid=child.pid, gpu_uuid=str(gpu.get_property("uuid")), used_memory=6144, while_alive=True)])
        else:
            pid = int(pid_file.read_text())
            (self.folder / "seen").write_text("running" if alive(pid) else "gone")

    def map(self, value: int) -> int:
        if self.attempt == 0 and value >= 50:
            raise RuntimeError("a crash that leaves a process on the GPU")
        return value
