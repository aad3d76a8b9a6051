"""``accelflow cluster status`` and ``inject-fault`` on a real session cluster (findings 9, 14
and 15 of review 7): status shows device health as ``/v1/taskexecutors`` does (a quarantined
GPU is not free, its reason and Xids are listed, what it keeps is marked), ends quietly when
its reader goes, and the drill takes a device UUID and escapes the TaskExecutor id.

One session (``accelflow cluster start``: 1 TaskExecutor, 2 fake GPUs of the fake
``nvidia-smi``); the tests run in order and the last two quarantine gpu 0, then gpu 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

REST_TESTS = Path(__file__).parents[1] / "rest"
if str(REST_TESTS) not in sys.path:
    sys.path.insert(0, str(REST_TESTS))

from rest_support import Session, cli, start_session, stop_and_check, wait_until  # noqa: E402

from accelflow.testing import fake_gpu_uuid  # noqa: E402

TE = "taskexecutor-1"
TWO_GPUS = '''
from accelflow import Environment

class Twice:  # resident: an instance per GPU stays in its device host after the job
    def map_batch(self, batch):
        return 2 * batch

# chained with a plain GPU map, so its subtasks start in warm processes (a resident-only chain
# is forked): a warm process per GPU stays too
out = Environment().from_sequence(0, 9, parallelism=2).map_batches(
    Twice(), batch_size=4, resident=True, name="twice", resources={"gpu": 1}, parallelism=2).map(
    abs, resources={"gpu": 1}, parallelism=2).execute_and_collect()
assert sorted(int(x) for x in out) == [2 * x for x in range(10)]
'''


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    tmp = tmp_path_factory.mktemp("status")
    started = start_session(tmp, **{"external-resource.gpu.param.health.probe-interval": "200 ms"})
    try:
        yield started
    finally:
        stop_and_check(started)


def _status(session: Session) -> str:
    out = cli(session.env, "cluster", "status", "--cluster", session.url)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _into_a_closed_pipe(session: Session, *args: str) -> subprocess.CompletedProcess[str]:
    """``accelflow ARGS`` whose stdout's reader has gone before it writes (``| head -0``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "accelflow", *args], env=session.env, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)


def test_status_into_a_closed_pipe_ends_quietly_with_141(session: Session) -> None:
    out = _into_a_closed_pipe(session, "cluster", "status", "--cluster", session.url)
    assert (out.returncode, out.stderr) == (141, "")


def test_the_drill_escapes_the_taskexecutor_id(session: Session) -> None:
    out = cli(session.env, "cluster", "inject-fault", "--cluster", session.url,
              "--taskexecutor", f"{TE}?x=", "--device", "0", "--xid", "79")
    assert out.returncode == 2
    assert out.stderr == f"accelflow: config error: --taskexecutor: no TaskExecutor '{TE}?x='; registered: {TE}\n"


def test_an_unknown_uuid_is_refused_listing_the_devices(session: Session) -> None:
    out = cli(session.env, "cluster", "inject-fault", "--cluster", session.url,
              "--taskexecutor", TE, "--device", "GPU-00000000-0000-4000-8000-999999999999", "--xid", "79")
    assert out.returncode == 2
    assert out.stderr == (
        f"accelflow: config error: --device: {TE} has no gpu device 'GPU-00000000-0000-4000-8000-999999999999'; "
        f"it has: 0 ({fake_gpu_uuid(0)}), 1 ({fake_gpu_uuid(1)}) (give an index or a UUID)\n")
    assert all(d["quarantined"] is None for d in session.devices().values())


def test_status_shows_a_quarantined_gpu_as_rest_does(session: Session) -> None:
    job = session.tmp / "two_gpus.py"
    job.write_text(textwrap.dedent(TWO_GPUS), encoding="utf-8")
    ran = cli(session.env, "run", "--cluster", session.url, str(job), timeout=120)
    assert ran.returncode == 0, ran.stderr
    wait_until(lambda: _status(session).count("warm processes: 1 ready of 1") == 2, "a warm process per GPU")
    assert "gpu: 2 free of 2 (2 devices)\n" in _status(session)

    out = cli(session.env, "cluster", "inject-fault", "--cluster", session.url,
              "--taskexecutor", TE, "--device", "0", "--xid", "79")
    assert out.returncode == 0, out.stderr
    device = wait_until(lambda: (d := session.devices()[f"{TE}/0"])["quarantined"] and d, "gpu 0 quarantined")
    assert device["quarantined"] == "Xid 79 (GPU has fallen off the bus)"

    lines = [line.strip() for line in _status(session).splitlines()]
    assert "gpu: 1 free of 2 (2 devices, 1 out of service)" in lines
    assert (f"gpu 0 on {TE}: quarantined: {device['quarantined']} (waits for a reset of the device); "
            "Xid 79 seen 1 time(s)") in lines
    assert f"warm processes: 1 ready of 1 on {TE} gpu 0 (device quarantined: not used)" in lines
    assert f"warm processes: 1 ready of 1 on {TE} gpu 1" in lines
    resident = {line.split(" (key ")[0]: line for line in lines if line.startswith("resident: twice on ")}
    assert set(resident) == {f"resident: twice on {TE} gpu 0", f"resident: twice on {TE} gpu 1"}, lines
    assert resident[f"resident: twice on {TE} gpu 0"].endswith(") (device quarantined: serves no new subtask)")
    assert "device quarantined" not in resident[f"resident: twice on {TE} gpu 1"]


def test_a_drill_takes_a_device_uuid_as_nvidia_smi_does(session: Session) -> None:
    out = cli(session.env, "cluster", "inject-fault", "--cluster", session.url,
              "--taskexecutor", TE, "--device", fake_gpu_uuid(1).lower(), "--xid", "79")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"injected Xid 79 (GPU has fallen off the bus, hardware) into {TE}: gpu 1\n"
    wait_until(lambda: session.devices()[f"{TE}/1"]["quarantined"], "gpu 1 quarantined")
