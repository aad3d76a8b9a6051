"""Suite-wide hooks: tests marked ``gpu`` run only where a real NVIDIA GPU exists (issue 12.9).

The marker is registered in ``pyproject.toml`` (``--strict-markers`` rejects unknown ones).
Tests that mean the fake ``nvidia-smi`` get it whatever the machine has (``accelflow.testing``'s
``use_fake_nvidia_smi``); tests that need the real one carry ``@pytest.mark.gpu`` and are
skipped here, with a reason that names the marker, unless ``has_real_gpu()`` is true.
The per-user state directory (``$ACCELFLOW_STATE_DIR``) is a temporary one for the whole run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
