"""Placement prefers the device where a resident operator's instance lives (issue 27).

One session cluster (``accelflow cluster start``, 1 TaskExecutor, 2 fake GPUs, no warm
processes so that only residency decides); jobs are ``accelflow run --cluster`` runs of a
script. A first job's resident operator opens on ``gpu 1`` (a blocker job holds ``gpu 0``
meanwhile); once the blocker is gone both GPUs are free and ``pack`` would take ``gpu 0``
(listed first), yet the second job with the same operator is placed on ``gpu 1`` and does
not call ``open()`` again; a changed operator gets the normal placement, ``gpu 0``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelflow.testing import fake_gpu_uuid

RUNTIME_TESTS = Path(__file__).parents[1] / "runtime"
if str(RUNTIME_TESTS) not in sys.path:  # warm_jobs: the session imports it too
    sys.path.insert(0, str(RUNTIME_TESTS))

from rest_support import Session, cli, start_session, stop_and_check, wait_until  # noqa: E402
from warm_jobs import lines  # noqa: E402

pytestmark = pytest.mark.slow

RESIDENT = '''
import os, sys
from accelflow import Environment
from warm_jobs import Model

env = Environment()
out = env.from_sequence(0, 99).map_batches(
    Model(os.environ["MODEL_LOG"], scale=int(sys.argv[1])), batch_size=50, resident=True,
    name="scaled", resources={"gpu": 1}).execute_and_collect()
assert sorted(int(x) for x in out) == [int(sys.argv[1]) * x for x in range(100)]
print("devices", env.last_result.devices)
'''

BLOCKER = '''
import os
from accelflow import Environment
from warm_jobs import Model, UntilFile

env = Environment()
env.from_source(UntilFile(os.environ["STOP"])).map_batches(
    Model(os.environ["BLOCK_LOG"], scale=1), batch_size=4, name="blocker", resources={"gpu": 1}).print()
env.execute("blocker")
'''


def _script(session: Session, name: str, text: str) -> Path:
    path = session.tmp / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _run(session: Session, scale: str, log: Path) -> str:
    out = cli(dict(session.env, MODEL_LOG=str(log)), "run", "--cluster", session.url,
              str(_script(session, "resident.py", RESIDENT)), scale, timeout=120)
    assert out.returncode == 0, out.stderr
    return next(line for line in out.stdout.splitlines() if line.startswith("devices"))


def _opened_on(log: Path) -> list[str]:
    return [o[2] for o in lines(log, "open")]  # the uuid of each open()'s GPU


def test_a_second_job_is_placed_where_its_resident_operator_is_open(tmp_path: Path) -> None:
    session = start_session(tmp_path, gpus=2, **{"taskmanager.device-pool.size": 0})
    blocker = None
    log, block_log, stop = tmp_path / "model.log", tmp_path / "block.log", tmp_path / "stop"
    try:
        blocker = subprocess.Popen(
            [sys.executable, "-m", "accelflow", "run", "--cluster", session.url,
             str(_script(session, "blocker.py", BLOCKER))],
            env=dict(session.env, BLOCK_LOG=str(block_log), STOP=str(stop)),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: lines(block_log, "open"), "the blocker holding gpu 0", timeout=60)
        assert _opened_on(block_log) == [fake_gpu_uuid(0)]
        first = _run(session, "10", log)
        assert _opened_on(log) == [fake_gpu_uuid(1)], first
        stop.touch()
        _, err = blocker.communicate(timeout=60)
        assert blocker.returncode == 0, err
        # the JobManager knows where the instance is (what the TaskExecutor reported)
        wait_until(lambda: [i["address"] for i in session.get("/v1/taskexecutors")["taskexecutors"][0]["resident"]]
                   == ["1"], "the instance on gpu 1 reported")
        second = _run(session, "10", log)
        assert _opened_on(log) == [fake_gpu_uuid(1)], second  # reused: no open() again
        assert second == first and "gpu 1" in second, (first, second)
        changed = _run(session, "20", log)  # another operator: no instance to prefer
        assert _opened_on(log) == [fake_gpu_uuid(1), fake_gpu_uuid(0)], changed
        assert "gpu 0" in changed, changed
    finally:
        stop.touch()
        if blocker is not None and blocker.poll() is None:
            blocker.kill()
            blocker.communicate()
        stop_and_check(session)
