"""Suite-wide hooks: tests marked ``gpu`` run only where a real NVIDIA GPU exists (issue 12.9).

The marker is registered in ``pyproject.toml`` (``--strict-markers`` rejects unknown ones).
Tests that mean the fake ``nvidia-smi`` get it whatever the machine has (``accelflow.testing``'s
``use_fake_nvidia_smi``); tests that need the real one carry ``@pytest.mark.gpu`` and are
skipped here, with a reason that names the marker, unless ``has_real_gpu()`` is true.
The per-user state directory (``$ACCELFLOW_STATE_DIR``) is a temporary one for the whole run.
A job a test starts on an embedded cluster and leaves running is cancelled when the test ends,
and the test fails: left running, it would restart on and on into the next tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from accelflow.runtime.client import JobClient
from accelflow.testing import NO_GPU, has_real_gpu

GPU_MARKER = "gpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker(GPU_MARKER) is not None]
    if not marked or has_real_gpu():
        return
    skip = pytest.mark.skip(reason=f"marked '{GPU_MARKER}': {NO_GPU}")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def private_state_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The per-user state directory of the whole run (the checkpoint signing key, session
    cluster files), here and in subprocesses: a temporary one, never the user's own, unless
    ``$ACCELFLOW_STATE_DIR`` is set already. Tests may set their own."""
    if os.environ.get("ACCELFLOW_STATE_DIR"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCELFLOW_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        yield


_CANCEL_WAIT_S = 60.0


@pytest.fixture(autouse=True)
def no_job_left_running(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cancel the embedded-cluster jobs the test started and left running (a failed assertion
    before ``wait()``, say), wait for their clusters to stop, and fail the test naming them."""
    started: list[JobClient] = []
    init = JobClient.__init__

    def recorded(self: JobClient, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        started.append(self)  # started: its thread runs the job

    monkeypatch.setattr(JobClient, "__init__", recorded)
    yield
    running = [client for client in started if not client._done.is_set()]
    for client in running:
        client.cancel()
    stuck = [client.name for client in running if not client._done.wait(_CANCEL_WAIT_S)]
    if running:
        pytest.fail(f"jobs left running at the end of the test, cancelled: "
                    f"{[client.name for client in running]}"
                    + (f"; still running {_CANCEL_WAIT_S:.0f} s later: {stuck}" if stuck else ""))
