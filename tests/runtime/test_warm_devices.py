"""Warm subtask processes (issue 27.1): a GPU subtask that holds one device starts in a process
spawned ahead for that device, with its isolation environment, its device framework
initialised (a fake CuPy here) and ``warm.preload`` imported; fake GPUs, real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from warm_jobs import WhereAmI, use_fake_gpus_with_cupy, lines

from accelflow import ConfigError, Environment


@pytest.fixture
def warm_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One TaskExecutor with 2 fake GPUs, a fake CuPy and the marker module importable by
    every process, a restart after the first failure."""
    gpu = use_fake_gpus_with_cupy(monkeypatch, tmp_path, 2)
    monkeypatch.setenv("WARM_MARKER_LOG", str(tmp_path / "marker.log"))
    monkeypatch.setenv("FAKE_CUPY_LOG", str(tmp_path / "cupy.log"))
    return {
        **gpu,
        "external-resource.gpu.warm.framework": "cupy",
        "external-resource.gpu.warm.preload": "warm_marker",
        "taskmanager.numberOfTaskSlots": 2,
        "taskmanager.device-pool.fork": False,  # spawned: the marker module logs each warm process
        "restart-strategy": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0.2 s",
    }


def _run(conf: dict[str, Any], log: Path) -> list[int]:
    env = Environment(conf)
    stream = env.from_sequence(1, 20).map(WhereAmI(str(log)), resources={"gpu": 1}, name="where")
    return sorted(stream.execute_and_collect())


def test_a_gpu_subtask_runs_in_a_warm_process_of_its_device_from_the_first_attempt(
        warm_conf: dict[str, Any], tmp_path: Path) -> None:
    """The local cluster is started for this job: its TaskExecutor spawns a warm process for
    the job's device at its start, so attempt 0 runs in one (without that, it is forked);
    the restart runs in the replacement spawned when attempt 0 took the first. One GPU (see
    test_resident.py: with a second GPU free, the restart may be placed there)."""
    log = tmp_path / "where.log"
    conf = dict(warm_conf, **{"external-resource.gpu.amount": 1})
    env = Environment(conf)
    stream = env.from_sequence(1, 20).map(WhereAmI(str(log), ahead=2), resources={"gpu": 1}, name="where")
    assert sorted(stream.execute_and_collect()) == list(range(1, 21))
    first, second = lines(log, "where")
    warm = [int(line.split()[0]) for line in (tmp_path / "marker.log").read_text().splitlines()]
    # each attempt ran in a process spawned for the device: the marker and CuPy imported, the
    # device made current, before it got its subtask; started by the TaskExecutor itself
    assert [first[2], second[2]] == ["0", "1"] and {int(first[0]), int(second[0])} == set(warm[:2])
    assert first[5] == second[5] == "warm_marker,cupy"
    assert second[4] == first[4] and second[4].startswith("GPU-")  # the device's isolation
    cupy_calls = [line.split() for line in (tmp_path / "cupy.log").read_text().splitlines()]
    assert all([w[0], "Device.use"] in cupy_calls and [w[0], "zeros"] in cupy_calls for w in (first, second))
    assert first[3] == second[3]  # their parent: the TaskExecutor (a forked one's: the forkserver)


def test_two_sharers_of_a_device_both_start_warm_in_the_first_job(warm_conf: dict[str, Any], tmp_path: Path) -> None:
    """Two subtasks at ``{"gpu": 0.5}``: the TaskExecutor warms two processes for the device
    they are packed on, at its start."""
    log = tmp_path / "where.log"
    env = Environment(dict(warm_conf, **{"restart-strategy": "none"}))
    stream = env.from_sequence(1, 20).map(WhereAmI(str(log), fail_first=False), resources={"gpu": 0.5},
                                          parallelism=2, name="where")
    assert sorted(stream.execute_and_collect()) == list(range(1, 21))
    where = lines(log, "where")
    warm = {int(line.split()[0]) for line in (tmp_path / "marker.log").read_text().splitlines()}
    assert len(where) == 2 and {int(w[0]) for w in where} <= warm and len({w[0] for w in where}) == 2
    assert {w[4] for w in where} == {where[0][4]} and {w[5] for w in where} == {"warm_marker,cupy"}


def test_a_pool_of_size_zero_forks_every_subtask(warm_conf: dict[str, Any], tmp_path: Path) -> None:
    conf = dict(warm_conf, **{"taskmanager.device-pool.size": 0})
    log = tmp_path / "where.log"
    env = Environment(dict(conf, **{"restart-strategy": "none"}))
    stream = env.from_sequence(1, 5).map(WhereAmI(str(log), fail_first=False), resources={"gpu": 1})
    assert sorted(stream.execute_and_collect()) == [1, 2, 3, 4, 5]
    assert [w[5] for w in lines(log, "where")] == ["-"]
    assert not (tmp_path / "marker.log").exists()  # no warm process was started at all


def test_a_preload_module_that_does_not_exist_is_named_with_its_key(warm_conf: dict[str, Any]) -> None:
    conf = dict(warm_conf, **{"external-resource.gpu.warm.preload": "warm_marker, no_such_module_x"})
    env = Environment(conf)
    env.from_sequence(1, 2).map(WhereAmI("unused"), resources={"gpu": 1}).print()
    with pytest.raises(ConfigError, match=r"external-resource\.gpu\.warm\.preload: no module named "
                                          r"'no_such_module_x' can be imported"):
        env.execute()


@pytest.mark.parametrize("key, value, culprit", [
    ("external-resource.gpu.warm.framework", "jax", "expected one of auto, torch, cupy, none"),
    ("external-resource.gpu.warm.preload", "torch vision", "'torch vision'"),
    ("taskmanager.device-pool.size", -1, "an integer from 0 to 16"),
    ("taskmanager.resident.max-instances", 0, "a positive integer up to 1024"),
])
def test_bad_warm_settings_name_their_key(warm_conf: dict[str, Any], key: str, value: Any, culprit: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as caught:
        Environment(dict(warm_conf, **{key: value}))
    assert culprit in str(caught.value)
