"""One small local Ray instance for every test here: 8 logical CPUs, 4 logical GPUs and
4 units of the custom resource ``fpga``. The Ray launcher joins it (``ray.is_initialized()``)
instead of starting its own, and leaves it running; the session shuts it down at the end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
if not hasattr(ray, "init"):  # without Ray, "ray" is this folder, imported as a namespace package
    pytest.skip("Ray is not installed (pip install 'accelflow[ray]')", allow_module_level=True)

for _dir in (Path(__file__).parent, Path(__file__).parent.parent / "runtime"):
    if str(_dir) not in sys.path:  # ray_jobs and runtime_jobs, imported by subtasks too
        sys.path.insert(0, str(_dir))

from ray_jobs import RAY_FPGAS, RAY_GPUS  # noqa: E402  (after the path is set)

from accelflow.config import config_from  # noqa: E402
from accelflow.config.keys import STATE_DIR_ENV_VAR  # noqa: E402
from accelflow.runtime.service._session import SessionCluster  # noqa: E402


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """The shared local Ray instance."""
    ray.init(num_cpus=8, num_gpus=RAY_GPUS, resources={"fpga": RAY_FPGAS},
             include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def ray_conf(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two TaskExecutor actors with two slots each, on the shared instance."""
    for var in ("CUDA_VISIBLE_DEVICES", "FPGA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return {
        "execution.target": "ray",
        "ray.number-taskmanager": 2,
        "local.number-taskmanager": 2,
        "taskmanager.numberOfTaskSlots": 2,
    }


@pytest.fixture
def session(ray_conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionCluster]:
    """A session cluster on the shared instance (its TaskExecutors are actors), stopped after;
    its REST server on a free port (another cluster on this host may hold 8081)."""
    monkeypatch.setenv(STATE_DIR_ENV_VAR, str(tmp_path / "state"))
    cluster = SessionCluster(config_from(values={**ray_conf, "rest.port": 0}))
    try:
        cluster.start(str(tmp_path / "session.log"))
        yield cluster
    finally:
        cluster.stop()
