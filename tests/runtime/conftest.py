"""Fixtures for tests on the real multi-process local cluster.

Every test here checks that no process it started outlives it: the test process becomes a
child subreaper (Linux), so TaskExecutors, their forkservers and subtasks that lose their
parent are re-parented to it and show up as its descendants instead of vanishing under init.
The processes meant to outlive a job are the client's zygotes (``local.start-method``).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from accelflow.runtime.launchers._zygote import zygote_pids
from accelflow.testing import use_fake_nvidia_smi

if str(Path(__file__).parent) not in sys.path:  # runtime_jobs, also for job scripts run by tests
    sys.path.insert(0, str(Path(__file__).parent))

_PR_SET_CHILD_SUBREAPER = 36
_LINGER_S = 10.0


def _set_subreaper(on: bool) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)


def _living_descendants(before: set[int]) -> list[psutil.Process]:
    living = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in before or child.pid in zygote_pids():  # they last as long as the client
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)  # an orphan re-parented to us: reap it
                continue
            living.append(child)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue
    return living


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    """Fail the test if any process it started is still alive shortly after it ends."""
    if not sys.platform.startswith("linux") or not _set_subreaper(True):
        yield
        return
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        yield
        deadline = time.monotonic() + _LINGER_S
        while (strays := _living_descendants(before)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if strays:
            described = [f"{p.pid}: {' '.join(p.cmdline())}" for p in strays]
            for p in strays:
                p.kill()
            pytest.fail(f"processes left behind: {described}")
    finally:
        _set_subreaper(False)


@pytest.fixture(autouse=True)
def no_job_left_running(no_stray_processes: None, no_job_left_running: None) -> Iterator[None]:
    """The suite's check (tests/conftest.py), set up after ``no_stray_processes`` so that it
    ends first: the jobs left running are cancelled before the check for strays."""
    yield


@pytest.fixture
def gpu_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two TaskExecutors with 2 of the host's 4 fake GPUs each, coordination on, 4 slots each.

    The fake ``nvidia-smi`` is first on ``PATH`` before the cluster starts, so TaskExecutors
    (which inherit the client's environment) run it as a real program.
    """
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 4)  # wins over a real GPU (issue 12.9)
    coordination = tmp_path / "gpu-coordination.json"
    monkeypatch.setenv("TEST_COORDINATION_FILE", str(coordination))
    return {
        "external-resources": "gpu",
        "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(coordination),
        "local.number-taskmanager": 2,
        "taskmanager.numberOfTaskSlots": 4,
    }


@pytest.fixture
def fpga_conf(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two TaskExecutors with static FPGAs "0" and "1" each and an isolation variable."""
    monkeypatch.delenv("FPGA_VISIBLE_DEVICES", raising=False)
    return {
        "external-resources": "fpga",
        "external-resource.fpga.amount": 2,
        "external-resource.fpga.driver-factory.class": "accelflow.testing:StaticDriverFactory",
        "external-resource.fpga.param.addresses": "0,1",
        "external-resource.fpga.param.env-var": "FPGA_VISIBLE_DEVICES",
        "local.number-taskmanager": 2,
        "taskmanager.numberOfTaskSlots": 4,
    }
