"""A subtask whose device has no warm process ready, but one still starting, waits for that one
instead of forking and importing everything again (issue 27): it runs in it once it is ready,
forks at once if it dies while starting or when it is not ready within a bound, and a cancel
while it waits starts nothing.

One TaskExecutor with 1 fake GPU, a fake CuPy, ``warm.preload: slow_marker`` (whose import
the test holds until the TaskExecutor chose how to start the GPU subtask), real processes.
The local cluster is started for the job, so its TaskExecutor spawns the warm process of the
job's device at its start, before anything is deployed: attempt 0's GPU subtask is deployed
while that process is still starting.
The TaskExecutor's trace (``$ACCELFLOW_STARTUP_TRACE``) says how each subtask started.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from warm_jobs import WhereAmI, use_fake_gpus_with_cupy, lines

from accelflow import Environment, JobCancelledError

#: the trace line of the TaskExecutor's choice for attempt 0's GPU subtask (wait or fork),
#: which ends the warm process's import (``slow_marker``)
ATTEMPT_0_DEPLOYED = r"subtask (waits for warm|forked) .*attempt=0, chain=1,"


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    gpu = use_fake_gpus_with_cupy(monkeypatch, tmp_path, 1)
    monkeypatch.setenv("SLOW_MARKER_LOG", str(tmp_path / "slow.log"))
    monkeypatch.setenv("ACCELFLOW_STARTUP_TRACE", str(tmp_path / "trace.log"))
    monkeypatch.setenv("SLOW_MARKER_UNTIL", f"{tmp_path / 'trace.log'}\t{ATTEMPT_0_DEPLOYED}")
    return {
        **gpu,
        "external-resource.gpu.warm.framework": "cupy",
        "external-resource.gpu.warm.preload": "slow_marker",
        "taskmanager.numberOfTaskSlots": 2,
        "taskmanager.device-pool.fork": False,  # spawned: the marker module logs each warm process
        "restart-strategy": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 s",
    }


def _job(conf: dict[str, Any], log: Path) -> Environment:
    env = Environment(conf)
    env.from_sequence(1, 20).map(WhereAmI(str(log), fail_first=False), resources={"gpu": 1}, name="where") \
        .add_sink(lambda x: None)
    return env


def _marker(tmp: Path) -> dict[str, list[int]]:
    """``slow_marker``'s log: event (start, done, died) → the processes, in order."""
    found: dict[str, list[int]] = {}
    for pid, event in _lines_of(tmp / "slow.log"):
        found.setdefault(event, []).append(pid)
    return found


def _lines_of(path: Path) -> list[tuple[int, str]]:
    """``(pid, event)`` per line of ``slow_marker``'s log."""
    return [(int(p), e) for p, e in (line.split() for line in path.read_text().splitlines())] if path.exists() else []


def _trace(tmp: Path, attempt: int) -> list[str]:
    """How the TaskExecutor started the GPU subtask (chain 1: ``where``, after the source's
    chain 0) of attempt ``attempt``: its trace events."""
    path = tmp / "trace.log"
    words = [line.split(maxsplit=2)[2] for line in path.read_text().splitlines()] if path.exists() else []
    return [w.split(" SubtaskKey")[0] for w in words
            if w.startswith("subtask ") and w.endswith(f"attempt={attempt}, chain=1, index=0)")]


def test_a_local_clusters_first_gpu_subtask_waits_for_the_warm_process_spawned_at_start(
        conf: dict[str, Any], tmp_path: Path) -> None:
    """Before anything was deployed, the TaskExecutor of the cluster started for this job
    spawned a warm process for the job's device; attempt 0 was deployed while it was still
    importing ``slow_marker`` (the import waited for the TaskExecutor's choice): it waited for
    it and ran in it, with nothing to import again (without the spawn at start it forks)."""
    log = tmp_path / "where.log"
    _job(conf, log).execute()
    (first,) = lines(log, "where")
    marker = _marker(tmp_path)
    warm = marker["start"][0]  # spawned at the TaskExecutor's start
    assert first[2] == "0" and int(first[0]) == warm and first[5] == "slow_marker,cupy"
    assert _trace(tmp_path, 0) == ["subtask waits for warm", "subtask warm"]
    assert marker["start"].count(warm) == 1 and marker["done"][0] == warm  # imported once, in that process


def test_a_warm_process_that_dies_while_starting_makes_the_waiting_subtask_fork(
        conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait would last 60 s (no warm process of the device was ever ready: nothing
    measured); the job's timeout is shorter, so only starting at the death lets it pass:
    forked, or in the replacement spawned as attempt 0 began to wait, where that one got
    ready first (it imports the marker too, and does not die)."""
    monkeypatch.setenv("SLOW_MARKER_DIE", "1")
    log = tmp_path / "where.log"
    client = _job(conf, log).execute_async("dies")
    client.wait(40)
    (first,) = lines(log, "where")
    marker = _marker(tmp_path)
    assert marker["died"] == marker["start"][:1]  # the process attempt 0 waited for
    assert first[2] == "0" and int(first[0]) not in marker["died"]
    if first[5] == "-":  # forked
        assert int(first[0]) not in marker["start"]
        assert _trace(tmp_path, 0) == ["subtask waits for warm", "subtask forked"]
    else:
        assert int(first[0]) == marker["start"][1] and first[5] == "slow_marker,cupy"
        assert _trace(tmp_path, 0) == ["subtask waits for warm", "subtask warm"]


def test_a_cancel_while_waiting_starts_nothing_and_leaves_no_process(
        conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm process is held starting until the TaskExecutor got the cancel; had the
    pending start been kept, it would run the cancelled subtask once ready (the JobManager
    waits up to 15 s for a subtask it cancelled to exit)."""
    monkeypatch.setenv("SLOW_MARKER_UNTIL", f"{tmp_path / 'trace.log'}\tcancel received job-")
    log = tmp_path / "where.log"
    client = _job(conf, log).execute_async("cancelled")
    deadline = time.monotonic() + 60
    while "subtask waits for warm" not in _trace(tmp_path, 0) or "start" not in _marker(tmp_path):
        assert time.monotonic() < deadline and client.status() in ("STARTING", "RUNNING"), "attempt 0 did not wait"
        time.sleep(0.02)
    client.cancel()  # the warm process gets ready once the TaskExecutor got it
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert lines(log, "where") == []  # attempt 0 never ran
    assert _trace(tmp_path, 0) == ["subtask waits for warm"]  # neither warm nor forked
    started = {pid for pid, _ in _lines_of(tmp_path / "slow.log")}
    assert started and not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                               for pid in started)


def test_a_warm_process_not_ready_within_its_bound_is_given_up_and_the_subtask_forks(
        conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm process spawned at start gets ready (attempt 0 runs in it): the bound is then
    three times its start-up, at least 5 s; its replacement hangs in its import, so attempt 1
    waits for it until the bound, then forks; the hung one is stopped (and replaced). The
    process spawned as attempt 1 claimed the hung one hangs too (else attempt 1 takes it, see
    the next test)."""
    monkeypatch.delenv("SLOW_MARKER_UNTIL")
    monkeypatch.setenv("SLOW_MARKER_S", "0.2")
    monkeypatch.setenv("SLOW_MARKER_HANG", "2,3")
    log = tmp_path / "where.log"
    env = Environment(conf)
    env.from_sequence(1, 20).map(WhereAmI(str(log), marker="SLOW_MARKER_LOG", ahead=2), resources={"gpu": 1},
                                 name="where").add_sink(lambda x: None)
    env.execute()
    marker = _marker(tmp_path)
    first_warm, hung = marker["start"][:2]
    attempts = {w[2]: w for w in lines(log, "where")}
    assert int(attempts["0"][0]) == first_warm and attempts["0"][5] == "slow_marker,cupy"
    assert int(attempts["1"][0]) not in marker["start"] and attempts["1"][5] == "-"  # forked
    assert _trace(tmp_path, 1) == ["subtask waits for warm", "subtask forked"]
    assert hung not in marker["done"] and not psutil.pid_exists(hung)  # stopped, never ready


def test_a_subtask_waiting_for_a_hung_warm_process_takes_the_next_one_ready(
        conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, but only the second warm process hangs: the one spawned as attempt 1 began to
    wait (a process a subtask waits for is replaced at once, not once it is ready) gets ready
    0.2 s later, and attempt 1 starts in it, long before the wait's bound (5 s)."""
    monkeypatch.delenv("SLOW_MARKER_UNTIL")
    monkeypatch.setenv("SLOW_MARKER_S", "0.2")
    monkeypatch.setenv("SLOW_MARKER_HANG", "2")
    log = tmp_path / "where.log"
    env = Environment(conf)
    env.from_sequence(1, 20).map(WhereAmI(str(log), marker="SLOW_MARKER_LOG", ahead=2), resources={"gpu": 1},
                                 name="where").add_sink(lambda x: None)
    env.execute()
    marker = _marker(tmp_path)
    first_warm, hung, third = marker["start"][:3]
    attempts = {w[2]: w for w in lines(log, "where")}
    assert int(attempts["0"][0]) == first_warm
    assert int(attempts["1"][0]) == third and attempts["1"][5] == "slow_marker,cupy"
    assert _trace(tmp_path, 1) == ["subtask waits for warm", "subtask warm"]
    assert hung not in marker["done"] and not psutil.pid_exists(hung)  # stopped with its TaskExecutor


def test_a_device_whose_warm_processes_import_nothing_ahead_forks_at_once(conf: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """No framework, no ``warm.preload``: a warm process only imports what the forkserver has
    imported already, so a fork is the sooner ready; attempt 1 (deployed right after attempt
    0 failed, while the process spawned then is most likely still starting) never waits."""
    log = tmp_path / "where.log"
    bare = {key: value for key, value in conf.items() if key != "external-resource.gpu.warm.preload"}
    env = Environment(dict(bare, **{"external-resource.gpu.warm.framework": "none",
                                    "execution.failover.in-place": False}))  # the source restarts too
    env.from_sequence(1, 20).map(WhereAmI(str(log), marker=None), resources={"gpu": 1}, name="where") \
        .add_sink(lambda x: None)
    env.execute()
    assert [w[2] for w in lines(log, "where")] == ["0", "1"]
    assert _trace(tmp_path, 0) == ["subtask forked"]
    assert _trace(tmp_path, 1) in (["subtask forked"], ["subtask warm"])  # never "waits for warm"


@pytest.mark.parametrize("in_place", [False, True], ids=["full-restart", "in-place"])
def test_sharers_cancelled_while_waiting_for_warm_processes_give_their_gpu_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool) -> None:
    # two subtasks at half a GPU; attempt 0 fails in open(); a subtask of the restarted attempt
    # cancelled while it waits for a warm process never started, so nothing can hold the GPU's
    # memory: its share goes back at once (it was held for a DevicesFree that never came, and
    # the restart waited forever for "gpu 0 has 0 free")
    gpu = use_fake_gpus_with_cupy(monkeypatch, tmp_path, 1)
    env = Environment({
        **gpu,
        "external-resource.gpu.warm.framework": "cupy", "taskmanager.device-pool.size": 1,
        "taskmanager.numberOfTaskSlots": 4, "restart-strategy": "fixed-delay",
        "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.in-place": in_place,
    })
    env.from_sequence(0, 99, parallelism=2).map(
        WhereAmI(str(tmp_path / "where.log"), fail_first=True, marker=None), resources={"gpu": 0.5},
        parallelism=2, name="where").add_sink(lambda r: None)
    client = env.execute_async("sharers")
    try:
        result = client.wait(120)
    finally:
        if client.status() not in ("FINISHED", "FAILED", "CANCELED"):
            client.cancel()
    assert result.status == "FINISHED" and result.attempts >= 2  # restarted, and not stuck PENDING
