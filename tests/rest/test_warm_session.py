"""Warm devices on a session cluster (issue 27): resident instances kept between jobs, what
``accelflow cluster status`` and ``/v1/taskexecutors`` show of them, nothing left after
``accelflow cluster stop``, and shares of one GPU bounded so that a leaking job fails alone.

One session cluster (``accelflow cluster start``, 1 TaskExecutor, 1 fake GPU of 80 GiB, a fake
CuPy whose device memory is shared by every process); jobs are ``accelflow run --cluster``
runs of scripts written by the tests, whose model classes are defined in the scripts (pickled
by value, as a user's are)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

RUNTIME_TESTS = Path(__file__).parents[1] / "runtime"
if str(RUNTIME_TESTS) not in sys.path:  # warm_jobs: the session imports it too
    sys.path.insert(0, str(RUNTIME_TESTS))

from rest_support import Session, cli, start_session, stop_and_check, wait_until  # noqa: E402
from warm_jobs import install_fake_cupy, lines  # noqa: E402

pytestmark = pytest.mark.slow

SCALED = '''
import os, sys
from accelflow import Environment

class Scaled:
    """A model defined in the job script itself."""
    def __init__(self, log, scale):
        self.log, self.scale = log, scale
    def open(self, ctx):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} open {self.scale}\\n")
    def map_batch(self, batch):
        return batch * self.scale

scale = int(sys.argv[1])
env = Environment()
out = env.from_sequence(0, 999, parallelism=2).map_batches(
    Scaled(os.environ["MODEL_LOG"], scale), batch_size=100, resident=True, name="scaled",
    resources={"gpu": 0.5}, parallelism=2).execute_and_collect()
assert sorted(int(x) for x in out) == [scale * x for x in range(1000)]
print("startup", env.last_result.startup_s)
'''


def _session(tmp: Path, **extra: object) -> Session:
    """A session with 1 fake GPU, the fake CuPy on its import path and its device in ``tmp``."""
    site = install_fake_cupy(tmp / "site")
    (tmp / "device").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))  # on the session's PYTHONPATH, not imported here
        mp.setenv("FAKE_CUPY_DEVICE", str(tmp / "device"))
        return start_session(tmp, gpus=1, **{"external-resource.gpu.amount": 1, **extra})


def _run(session: Session, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = session.tmp / f"job-{abs(hash(script))}.py"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    return cli(dict(session.env, **env), "run", "--cluster", session.url, str(path), *args, timeout=120)


def _hosts(session: Session) -> list[psutil.Process]:
    return [p for p in session.processes() if "accelflow.runtime.devicehost" in " ".join(p.cmdline())]


def test_a_session_keeps_resident_instances_between_jobs_and_stop_ends_them(tmp_path: Path) -> None:
    session = _session(tmp_path, **{"external-resource.gpu.warm.framework": "cupy"})
    log = tmp_path / "model.log"
    for scale in ("10", "10", "20"):  # the same operator twice, then a changed one
        out = _run(session, SCALED, scale, MODEL_LOG=str(log))
        assert out.returncode == 0, out.stderr
    # one open() per operator on the device: the second job reused the first one's instance
    assert [o[2] for o in lines(log, "open")] == ["10", "20"]
    status = wait_until(lambda: (out := cli(session.env, "cluster", "status", "--cluster", session.url))
                        and out.stdout.count("0 subtask(s)") == 2 and out, "both instances idle")
    resident = [line.strip() for line in status.stdout.splitlines() if line.strip().startswith("resident:")]
    assert len(resident) == 2 and all(r.startswith("resident: scaled on taskexecutor-1 gpu 0 (key ")
                                      and "0 subtask(s)" in r for r in resident), status.stdout
    # the sharers were forked (they compute nothing on the device): no warm process, with a
    # device context of its own, is kept for them; the host's is the device's only one
    assert "warm processes:" not in status.stdout
    te = session.get("/v1/taskexecutors")["taskexecutors"][0]
    assert sorted(i["operator"] for i in te["resident"]) == ["scaled", "scaled"]
    assert len({i["key"] for i in te["resident"]}) == 2 and all(i["memory"] == 0 for i in te["resident"])
    hosts = _hosts(session)
    assert len(hosts) == 1  # one device, one host
    stop_and_check(session)  # no process of the cluster is left, device hosts included
    assert not any(p.is_running() for p in hosts)


WHERE = '''
import os
from accelflow import Environment
from warm_jobs import WhereAmI

env = Environment()
out = env.from_sequence(0, 99, parallelism=2).map(
    WhereAmI(os.environ["WHERE_LOG"], fail_first=False), resources={"gpu": 0.5}, parallelism=2,
    name="where").execute_and_collect()
assert sorted(out) == list(range(100))
'''


def _pools(session: Session) -> list[tuple[int, int]]:
    """``(ready, size)`` of each warm pool ``accelflow cluster status`` shows."""
    out = cli(session.env, "cluster", "status", "--cluster", session.url)
    assert out.returncode == 0, out.stderr
    return [(int(w[2]), int(w[5])) for w in (line.split() for line in out.stdout.splitlines())
            if w[:2] == ["warm", "processes:"]]


def _refilled(session: Session) -> list[tuple[int, int]]:
    """The warm pools once every process of each is ready."""
    return wait_until(lambda: (pools := _pools(session)) and all(r >= n for r, n in pools) and pools,
                      "every warm process ready", timeout=60)


def test_a_second_job_finds_a_warm_process_ready_for_each_subtask_sharing_its_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two subtasks at ``{"gpu": 0.5}`` on one GPU, ``taskmanager.device-pool.size`` at its
    default (1): the pool keeps a process per subtask the device ran at once, so the second
    job's two subtasks both start in processes that were ready before it began (each imported
    ``warm.preload`` ahead, none during the job); with one ready, the other forked or waited
    for a fresh one's imports, and the whole job with it. Spawned warm processes (each imports
    the marker: the processes counted by its log); the next test forks them."""
    marker, where = tmp_path / "marker.log", tmp_path / "where.log"
    monkeypatch.setenv("WARM_MARKER_LOG", str(marker))
    session = _session(tmp_path, **{"external-resource.gpu.warm.preload": "warm_marker",
                                    "taskmanager.device-pool.fork": False})
    try:
        assert _run(session, WHERE, WHERE_LOG=str(where)).returncode == 0
        _refilled(session)
        warm_before = {int(line) for line in marker.read_text().splitlines()}
        first = len(lines(where, "where"))
        out = _run(session, WHERE, WHERE_LOG=str(where))
        assert out.returncode == 0, out.stderr
        second = lines(where, "where")[first:]
        assert len(second) == 2 and all(int(w[0]) in warm_before and "warm_marker" in w[5].split(",")
                                       for w in second), (second, warm_before)
        # 2 kept, not more: each subtask took one, and each was replaced once
        assert _refilled(session) == [(2, 2)]
        assert len(marker.read_text().splitlines()) == len(warm_before) + 2
    finally:
        stop_and_check(session)


def test_back_to_back_jobs_start_in_processes_forked_by_the_warm_zygote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's refills are forked by the TaskExecutor's warm zygote, which imported the
    device framework and ``warm.preload`` once: the third job's two sharers start in its
    children (the marker imported before ``open()``, by their parent, not by them), so a
    refill costs a CUDA context, not a fresh interpreter's imports (torch's 2-5 s)."""
    marker, where = tmp_path / "marker.log", tmp_path / "where.log"
    monkeypatch.setenv("WARM_MARKER_LOG", str(marker))
    session = _session(tmp_path, **{"external-resource.gpu.warm.preload": "warm_marker"})
    try:
        for _ in range(3):
            out = _run(session, WHERE, WHERE_LOG=str(where))
            assert out.returncode == 0, out.stderr
            _refilled(session)
        importers = {int(line) for line in marker.read_text().splitlines()}
        third = lines(where, "where")[4:]
        assert len(third) == 2, third
        for w in third:
            assert "warm_marker" in w[5].split(",") and w[4].startswith("GPU-"), third  # warm, isolated
            assert int(w[3]) in importers and int(w[0]) not in importers, (third, importers)
    finally:
        stop_and_check(session)


LEAKY = '''
import sys
from accelflow import Environment
from warm_jobs import Leaky, SmallChunks

env = Environment()
env.from_source(SmallChunks(100_000, chunk=4, delay=0.005)).map_batches(
    Leaky(leak_mib=4096), batch_size=4, name="leaky", resources={"gpu": 0.5}).print()
env.execute("leaky")
'''

STEADY = '''
import os
from accelflow import Environment
from warm_jobs import Spiky, UntilFile

env = Environment()
out = env.from_source(UntilFile(os.environ["STOP"])).map_batches(
    Spiky(os.environ["MODEL_LOG"], spike_mib=12288), batch_size=4, name="steady",
    resources={"gpu": 0.5}).execute_and_collect()
print("steady records", len(out))
'''


def test_a_leaking_share_fails_alone_and_its_neighbour_keeps_running(tmp_path: Path) -> None:
    """Two jobs share the GPU at half each: one keeps 4 GiB more every batch, the other needs
    12 GiB for a moment every batch. Each share is bounded to half of the GPU's 80 GiB: the
    leak fails at 40 GiB naming its operator and share; without the bound it would have taken
    the whole device, and its neighbour's next 12 GiB with it."""
    session = _session(tmp_path)
    steady = None
    try:
        log, stop = tmp_path / "steady.log", tmp_path / "stop"
        path = tmp_path / "steady.py"
        path.write_text(STEADY, encoding="utf-8")
        steady = subprocess.Popen(
            [sys.executable, "-m", "accelflow", "run", "--cluster", session.url, str(path)],
            env=dict(session.env, MODEL_LOG=str(log), STOP=str(stop)), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        wait_until(lambda: lines(log, "spike"), "the steady job's first batch", timeout=60)
        leaky = _run(session, LEAKY)
        assert leaky.returncode == 1
        assert ("operator 'leaky' asked for gpu: 0.5 (a limit of 40 GiB on gpu 0); it held 40 GiB when it "
                "asked for more: OutOfMemoryError: Out of memory allocating 4,294,967,296 bytes") in leaky.stderr, \
            leaky.stderr
        spikes = len(lines(log, "spike"))
        wait_until(lambda: len(lines(log, "spike")) > spikes + 10, "the steady job going on")
        stop.touch()
        out, err = steady.communicate(timeout=60)
        assert steady.returncode == 0, err
        assert "steady records" in out
    finally:
        if steady is not None and steady.poll() is None:
            steady.kill()
            steady.communicate()
        stop_and_check(session)
    assert os.listdir(tmp_path / "device")  # the fake device saw both
