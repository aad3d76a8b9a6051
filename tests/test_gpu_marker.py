"""The root ``conftest.py`` hook: tests marked ``gpu`` run only where a real GPU exists."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from accelflow.testing import has_real_gpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.gpu
def test_a_gpu_marked_test_runs_only_on_a_machine_with_a_real_gpu() -> None:
    assert has_real_gpu()  # fails wherever the hook does not skip it on a GPU-less machine


def test_the_skip_reason_names_the_marker(request: pytest.FixtureRequest) -> None:
    found = [
        item
        for item in request.session.items
        if item.name == "test_a_gpu_marked_test_runs_only_on_a_machine_with_a_real_gpu"
    ]
    if not found:
        pytest.skip("run together with the gpu-marked test of this module")
    (marked,) = found
    skip = marked.get_closest_marker("skip")
    if has_real_gpu():
        assert skip is None
    else:
        assert skip is not None and "marked 'gpu'" in skip.kwargs["reason"]


def test_the_gpu_marker_is_registered() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    options = pyproject["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in options["addopts"]
    assert any(m.startswith("gpu:") for m in options["markers"])
