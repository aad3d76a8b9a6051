"""Resident operators on a session cluster, as a user meets them between jobs (review 7):
a model class in a module next to the job script, edited between two runs, runs its new code;
a resident call that never returns is reported with the user's frames and its instance is
dropped (``accelflow cluster status`` says HUNG); ``/v1/taskexecutors`` counts batches.

One session cluster (``accelflow cluster start``, 1 fake GPU, ``heartbeat.timeout`` 3 s) whose
``PYTHONPATH`` holds the model's module, as in the review's repro; jobs are ``accelflow run
--cluster`` runs of scripts the tests write."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator

import pytest
from rest_support import Session, cli, start_session, stop_and_check

pytestmark = pytest.mark.slow

MODEL = '''
class Predict:
    def map_batch(self, batch):
        return batch * {scale}
'''

PREDICT = '''
import sys
sys.path.insert(0, {moddir!r})
from mymodel import Predict
from accelflow import Environment

env = Environment()
out = env.from_sequence(1, 5).map_batches(Predict(), batch_size=4, resident=True, name="predict",
                                          resources={{"gpu": 0.5}})
print(sorted(int(x) for x in out.execute_and_collect()))
'''

HANG = '''
import time
from accelflow import Environment

class Hang:
    def map_batch(self, batch):
        time.sleep(10**6)  # the hung line
        return batch

env = Environment({"restart-strategy": "none"})
print(env.from_sequence(1, 10).map_batches(Hang(), batch_size=4, resident=True, name="hang",
                                           resources={"gpu": 0.5}).execute_and_collect())
'''


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    tmp = tmp_path_factory.mktemp("resident-session")
    moddir = tmp / "mod"
    moddir.mkdir()
    (moddir / "mymodel.py").write_text(MODEL.format(scale=2), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(moddir))  # on the session's PYTHONPATH: its processes can import it
        started = start_session(tmp, gpus=1, **{"external-resource.gpu.amount": 1, "heartbeat.timeout": "3 s"})
    yield started
    stop_and_check(started)


def _run(session: Session, name: str, script: str) -> subprocess.CompletedProcess[str]:
    path = session.tmp / name
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    return cli(session.env, "run", "--cluster", session.url, str(path), timeout=120)


def test_an_edited_model_module_runs_its_new_code(session: Session) -> None:
    """Before: the key was the same after the edit (the class pickled by name) and the device
    host had imported the module already: [2, 4, 6, 8, 10] again."""
    moddir = session.tmp / "mod"
    job = PREDICT.format(moddir=str(moddir))
    first = _run(session, "predict.py", job)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().splitlines()[-1] == "[2, 4, 6, 8, 10]"
    (moddir / "mymodel.py").write_text(MODEL.format(scale=3), encoding="utf-8")
    second = _run(session, "predict.py", job)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip().splitlines()[-1] == "[3, 6, 9, 12, 15]"
    again = _run(session, "predict.py", job)  # unchanged: the same instance again
    assert again.returncode == 0, again.stderr
    resident = [i for i in session.get("/v1/taskexecutors")["taskexecutors"][0]["resident"]
                if i["operator"] == "predict"]
    assert len(resident) == 2, resident  # one instance per version of the code
    # 5 records in requests of at most 4: 2 batches a job (REST counted none before)
    assert sorted(i["batches"] for i in resident) == [2, 4], resident


def test_a_hung_resident_call_shows_the_users_line_and_its_instance_is_dropped(session: Session) -> None:
    """Before: the message showed accelflow's frames only (the subtask waiting on its device
    host), and the stuck instance stayed resident, handed to the next job."""
    out = _run(session, "hang.py", HANG)
    assert out.returncode != 0
    line = HANG.splitlines().index("        time.sleep(10**6)  # the hung line") + 1
    assert "is hung and was killed" in out.stderr, out.stderr
    assert "in resident operator 'hang' in its device host" in out.stderr, out.stderr
    assert f'File "{session.tmp / "hang.py"}", line {line} in map_batch' in out.stderr, out.stderr
    status = cli(session.env, "cluster", "status", "--cluster", session.url)
    hung = [r.strip() for r in status.stdout.splitlines() if r.strip().startswith("resident: hang ")]
    assert len(hung) == 1 and "(HUNG (a call never returned" in hung[0], status.stdout
    again = _run(session, "hang.py", HANG)  # a fresh instance, not the stuck one: hung in turn
    assert "in resident operator 'hang' in its device host" in again.stderr, again.stderr
    status = cli(session.env, "cluster", "status", "--cluster", session.url)
    assert status.stdout.count("(HUNG (a call never returned") == 2, status.stdout
