"""Start-up on Ray (issue 17 item 9): what the Ray launcher does before the first record.

* the actors of one start are pinged together: no actor waits for another's registration;
* no per-actor Ray runtime environment unless one is asked for (it made Ray start every
  actor's worker through its runtime-env agent);
* subtasks do not run Ray's worker script again (multiprocessing's ``__main__`` fix-up
  imported Ray in every subtask);
* two jobs of one process at one ``ray.address`` connect once (one ``ray.init``);
* ``$ACCELFLOW_STARTUP_TRACE`` shows the actors' own phases too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelflow import Environment
from accelflow.config import config_from
from accelflow.runtime.launchers._ray import actor_environment, runtime_env
from accelflow.runtime.taskexecutor import TRACE_ENV_VAR

from test_ray_multinode import (  # the two-node tests' cluster helpers (tests/ray on sys.path)
    Cluster, start_head, stop_cluster,
)


def _events(path: Path) -> list[tuple[int, str]]:
    """``(pid, event)`` of each trace line, in the order written."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        _stamp, pid, event = line.split(" ", 2)
        out.append((int(pid), event))
    return out


def test_no_runtime_env_per_actor_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACE_ENV_VAR, "/tmp/af-trace.txt")
    monkeypatch.delenv("PYTHONPATH", raising=False)  # accelflow is installed, not found through it
    assert runtime_env(config_from(values={})) == {}
    env = actor_environment()  # applied by the actor itself, before its forkserver starts
    assert env["PYTHONHASHSEED"] == "0" and env[TRACE_ENV_VAR] == "/tmp/af-trace.txt"
    assert str(Path(__file__).parent) in env["PYTHONPATH"].split(os.pathsep)  # conftest put it on sys.path


def test_subtasks_do_not_import_ray_and_see_the_clients_hash_seed(ray_conf: dict[str, Any]) -> None:
    seen = Environment(ray_conf).from_sequence(0, 3).map(
        lambda _: ("ray" in sys.modules, os.environ.get("PYTHONHASHSEED"))).execute_and_collect()
    assert set(seen) == {(False, "0")}


def test_the_actors_of_one_start_are_pinged_together_and_trace_their_phases(
    ray_conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv(TRACE_ENV_VAR, str(trace))
    rows = Environment(ray_conf).from_sequence(1, 8).map(lambda x: x * 2).execute_and_collect()
    assert sorted(rows) == [2 * i for i in range(1, 9)]
    events = _events(trace)
    mine = [e for pid, e in events if pid == os.getpid()]
    pings = [i for i, e in enumerate(mine) if e.startswith("actor ping ")]
    placed = [i for i, e in enumerate(mine) if e.startswith("actor placed ")]
    assert len(pings) == 2 and len(placed) == 2, mine
    assert max(pings) < min(placed), mine  # the second actor did not wait for the first
    theirs = {e.rsplit(" ", 1)[0] for pid, e in events if pid != os.getpid()}
    for phase in ("te process created", "te imports done", "te forkserver started", "te drivers done"):
        assert phase in theirs, sorted(theirs)
    assert any(e.startswith("subtask forked") for _, e in events)


TWO_JOBS = """
import json, sys
import ray
from accelflow import Environment
calls = []
init = ray.init
def counting(*args, **kwargs):
    calls.append(kwargs.get("address"))
    return init(*args, **kwargs)
ray.init = counting
conf = json.loads(sys.argv[1])
for _ in range(2):
    rows = Environment(conf).from_sequence(1, 8).map(lambda x: x * 2).execute_and_collect()
    assert sorted(rows) == [2 * i for i in range(1, 9)], rows
print("INITS", json.dumps(calls))
"""


@pytest.fixture(scope="module")
def head_only() -> Iterator[Cluster]:
    """An existing one-node Ray cluster (``ray start --head``), started before any job."""
    cluster, _ = start_head("afst-")
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@pytest.mark.slow
@pytest.mark.multinode
def test_two_jobs_of_one_process_at_one_address_connect_once(head_only: Cluster, tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    conf = {"execution.target": "ray", "ray.address": head_only.address,
            "ray.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": 1}
    proc = subprocess.run([sys.executable, "-c", TWO_JOBS, json.dumps(conf)],
                          env={**head_only.env(), TRACE_ENV_VAR: str(trace)},
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("INITS ")]
    assert lines, proc.stderr[-4000:]
    assert json.loads(lines[-1][len("INITS "):]) == [head_only.address]  # one ray.init
    client = [e for _, e in _events(trace) if e.startswith(("ray connect", "actor ping", "actor placed"))]
    assert client.count("ray connect") == 1 and client.count("ray connection reused") == 1, client
    for job in (client[:client.index("ray connection reused")], client[client.index("ray connection reused"):]):
        pings = [i for i, e in enumerate(job) if e.startswith("actor ping ")]
        placed = [i for i, e in enumerate(job) if e.startswith("actor placed ")]
        assert len(pings) == 2 and max(pings) < min(placed), job
