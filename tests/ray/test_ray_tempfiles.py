"""TaskExecutor actors leave nothing in ``$TMPDIR``: each keeps its temporary files (its relay's
sockets, its forkserver's socket, the watchdog's files) in a work directory of its own,
``accelflow-ray-*``, removed when the actor stops; the one of an actor that was killed
(``ray.kill``, the OOM killer) is removed by the next actor started on that host.

Before, every actor left a ``pymp-*`` directory (the launcher kills each actor after stopping
it, so multiprocessing never removed it), and a killed actor its relay directory too.

The job runs in a client process of its own with a ``$TMPDIR`` of the test's own, which the
local Ray instance it starts, and so every actor, inherits (short: Ray's socket paths).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOB = """
import json, os, sys, time
import ray
from accelflow import Environment

marks = sys.argv[1]
ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
conf = {"execution.target": "ray", "ray.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": 1,
        "parallelism.default": 2, "restart-strategy": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3, "restart-strategy.fixed-delay.delay": "0 s"}

def slow(x):
    open(os.path.join(marks, "running"), "w").close()
    time.sleep(0.01)
    return x

env = Environment(conf)
env.from_sequence(0, 999).map(slow).add_sink(lambda x: None)
client = env.execute_async("killed actor")
while not os.path.exists(os.path.join(marks, "running")):
    time.sleep(0.02)
client.launcher.ray.kill(client.launcher.actor("taskexecutor-2"))
client.wait(180)
print("AFTER", json.dumps(sorted(os.listdir(os.environ["TMPDIR"]))))
print("RESULT", json.dumps(sorted(Environment(conf).from_sequence(0, 9).map(lambda x: x * 2).execute_and_collect())))
ray.shutdown()
"""


@pytest.fixture
def short_tmpdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="afrt-", dir="/tmp"))  # short: Ray's Unix socket paths
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_actors_killed_or_stopped_leave_nothing_of_ours_in_tmpdir(short_tmpdir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    env = {**os.environ, "TMPDIR": str(short_tmpdir), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", JOB, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("AFTER ", "RESULT ")))
    assert proc.returncode == 0 and "RESULT" in lines, proc.stderr[-4000:]
    assert json.loads(lines["RESULT"]) == list(range(0, 20, 2))
    ours = sorted(p.name for p in short_tmpdir.iterdir() if p.name.startswith(("accelflow-", "pymp-")))
    assert ours == [], (ours, lines["AFTER"])
