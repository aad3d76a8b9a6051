"""Suite-wide hooks: tests marked ``gpu`` run only where a real NVIDIA GPU exists (issue 12.9).

The marker is registered in ``pyproject.toml`` (``--strict-markers`` rejects unknown ones).
Tests that mean the fake ``nvidia-smi`` get it whatever the machine has (``accelflow.testing``'s
``use_fake_nvidia_smi``); tests that need the real one carry ``@pytest.mark.gpu`` and are
skipped here, with a reason that names the marker, unless ``has_real_gpu()`` is true.
"""

from __future__ import annotations

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
