"""The warm zygote (``runtime/subtask/_warm.py``, ``taskexecutor/_warmzygote.py``): a process
that imported the device framework and ``warm.preload`` once and forks the warm subtask
processes, each with its device's isolation environment; one whose imports initialised CUDA
(which a forked child cannot use) is never used, and says why. Real processes; the pool's use
of it in a session: ``tests/rest/test_warm_session.py``."""

from __future__ import annotations

import logging
import os
import socket
import time
from multiprocessing.connection import Connection
from pathlib import Path

import psutil
import pytest

from accelflow.runtime import WarmReady
from accelflow.runtime.taskexecutor._warmpool import SUBTASK_MODULE
from accelflow.runtime.taskexecutor._warmzygote import ZygoteChild, Zygotes

#: a warm.preload module that leaves CUDA initialised, as a module that touches the device at
#: import does (a stand-in torch whose CUDA says so)
CUDA_AT_IMPORT = '''
import sys, types
torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)
sys.modules["torch"] = torch
'''


def _fork(zygotes: Zygotes, command: list[str], env: dict[str, str]) -> tuple[ZygoteChild | None, Connection]:
    """A fork once the zygote has imported (the first calls find it importing: None)."""
    deadline = time.monotonic() + 30
    while True:
        mine, theirs = socket.socketpair()
        child = zygotes.fork(command, env, theirs.fileno())
        theirs.close()
        conn = Connection(mine.detach())
        zygote = zygotes.started.get(tuple(command))
        if child is not None or zygote is None or time.monotonic() > deadline:
            return child, conn
        conn.close()
        time.sleep(0.05)


def test_warm_processes_are_forked_by_the_zygote_and_exit_unused(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ahead_mod.py").write_text("import os\nIMPORTED_BY = os.getpid()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    zygotes = Zygotes(SUBTASK_MODULE)
    try:
        command = ["none", "external-resource.gpu.warm.preload", "ahead_mod"]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="GPU-test-uuid")
        children = []
        for _ in range(2):
            child, conn = _fork(zygotes, command, env)
            assert child is not None
            ready = conn.recv()
            assert isinstance(ready, WarmReady) and ready.pid == child.pid
            process = psutil.Process(child.pid)
            zygote = zygotes.started[tuple(command)]
            assert zygote is not None and process.ppid() == zygote.popen.pid  # forked, not spawned
            # (its os.environ, which /proc does not show, is checked where a subtask reads it:
            # test_warm_session.py's forked sharers see their GPU's CUDA_VISIBLE_DEVICES)
            children.append((child, conn))
        for child, conn in children:
            conn.close()  # the pool closed: an unused warm process exits
            assert child.wait(10) == 0 and child.poll() == 0
    finally:
        zygotes.close()


def test_a_zygote_whose_imports_initialised_cuda_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "cuda_at_import.py").write_text(CUDA_AT_IMPORT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    zygotes = Zygotes(SUBTASK_MODULE)
    try:
        command = ["none", "external-resource.gpu.warm.preload", "cuda_at_import"]
        with caplog.at_level(logging.WARNING, logger="accelflow.runtime"):
            child, conn = _fork(zygotes, command, dict(os.environ))
        conn.close()
        assert child is None and zygotes.started[tuple(command)] is None  # spawned from now on
        assert ("CUDA was initialised while importing none and external-resource.gpu.warm.preload's "
                "modules (cuda_at_import): a forked process cannot use it") in caplog.text
    finally:
        zygotes.close()


def test_a_zygote_that_died_is_replaced_by_spawning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    zygotes = Zygotes(SUBTASK_MODULE)
    try:
        command = ["none", "external-resource.gpu.warm.preload"]
        child, conn = _fork(zygotes, command, dict(os.environ))
        assert child is not None
        conn.close()
        child.wait(10)
        zygote = zygotes.started[tuple(command)]
        assert zygote is not None
        zygote.popen.kill()
        zygote.popen.wait()
        with caplog.at_level(logging.WARNING, logger="accelflow.runtime"):
            child, conn = _fork(zygotes, command, dict(os.environ))
        conn.close()
        assert child is None and f"the warm zygote (pid {zygote.popen.pid}) exited" in caplog.text
    finally:
        zygotes.close()
