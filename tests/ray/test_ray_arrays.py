"""NumPy sources on the Ray target travel through Ray's object store (issue 14): the
JobManager puts each array there once per job, the subtasks' descriptors carry the refs, and
each TaskExecutor actor maps the array for its subtasks, freeing it when they have exited.
The client's own shared memory (``/proc/<client pid>/fd``, unreachable from another machine)
is never used."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ray_jobs import wait_until

from accelflow import Environment
from accelflow.connectors import ArraySource
from accelflow.runtime import ObjectArray, object_handles, shared_view
from accelflow.runtime.client import ExecutionContext, use_context
from accelflow.runtime.service._session import SessionCluster

pytestmark = pytest.mark.slow


def _array_memfds(pid: int) -> list[str]:
    """The shared-memory files of NumPy source arrays that process ``pid`` holds open."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("/memfd:accelflow-array"):
            out.append(target)
    return out



class _WaitFor:
    """Map records unchanged once ``path`` exists: holds the job while the test looks."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self, row: Any) -> Any:
        while not os.path.exists(self.path):
            time.sleep(0.02)
        return json.dumps(row.tolist())


def test_a_numpy_source_goes_through_the_object_store_not_the_clients_memory(
        ray_conf: dict[str, Any], tmp_path: Path) -> None:
    data = np.arange(60_000, dtype=np.float64).reshape(20_000, 3)
    env = Environment(ray_conf)
    stream = env.from_collection(data, parallelism=4).map(_WaitFor(tmp_path / "go"), parallelism=4)
    stream.sink_to_file(tmp_path / "out.jsonl")
    client = env.execute_async()
    (source,) = [t.source for t in client.graph.sources if isinstance(t.source, ArraySource)]
    try:
        wait_until(lambda: len(client.launcher.pids) == 2 and client.jobmanager.subtasks
                    and all(st.state == "RUNNING" for st in client.jobmanager.subtasks.values()),
                    "the subtasks to run")
        (placeholder,) = shared_view(source).arrays
        assert isinstance(placeholder, ObjectArray)  # what the subtasks were sent
        assert (placeholder.dtype, placeholder.shape) == (data.dtype, data.shape)
        (ref,) = object_handles(source).values()
        assert np.array_equal(client.launcher.ray.get(ref), data)  # in the object store, once
        assert _array_memfds(os.getpid()) == []  # never the client's memory
        for pid in client.launcher.pids.values():  # each actor maps it once for its subtasks
            assert len(_array_memfds(pid)) == 1
    finally:
        (tmp_path / "go").touch()
    client.wait(120)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(rows) == data.tolist()  # every row once, exactly
    assert object_handles(source) == {} and source.arrays[0] is data  # the ref is dropped at the end



def test_the_actors_of_a_session_free_the_array_when_its_subtasks_have_exited(
        session: SessionCluster, ray_conf: dict[str, Any]) -> None:
    assert session.info is not None
    with session.jobmanager.lock:
        pids = [te.registration.pid for te in session.jobmanager.taskexecutors.values()]
    for job in range(2):  # the second job's array is fetched again, under a new id
        data = np.arange(10_000, dtype=np.int32) + job
        with use_context(ExecutionContext(cluster_url=session.info.url)):
            env = Environment({**ray_conf, "parallelism.default": 4})
            rows = env.from_collection(data, parallelism=4).map(lambda x: int(x) * 2).execute_and_collect()
        assert sorted(rows) == [2 * int(x) for x in data]
        wait_until(lambda: all(_array_memfds(pid) == [] for pid in pids), "the actors to free the array")
