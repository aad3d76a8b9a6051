"""Nothing of accelflow's accumulates in ``$TMPDIR`` when a cluster dies: every process keeps
its temporary files in its cluster's work directory (``accelflow-*``, with an ``owner`` file),
and the next cluster started on the host removes the work directories whose owner died.
Real processes, a ``$TMPDIR`` of the test's own (for the test and every process it starts)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from warm_jobs import WhereAmI

from accelflow import Environment
from accelflow.runtime import make_work_dir, pid_namespace, sweep_work_dirs
from accelflow.testing import use_fake_nvidia_smi

SLOW_JOB = """\
import time
from accelflow import Environment
env = Environment({"local.number-taskmanager": 2, "parallelism.default": 2})
env.from_sequence(1, 20000).map(lambda x: (time.sleep(0.01), x)[1]).add_sink(lambda x: None)
env.execute("slow")
"""


@pytest.fixture
def tmpdir_of_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``$TMPDIR`` for this process (``tempfile``) and the processes it starts."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads $TMPDIR again
    return tmp


def _wait_for_subtasks(tmp: Path, proc: subprocess.Popen[str]) -> Path:
    """The cluster's work directory once its subtasks run (the watchdog watches them)."""
    deadline = time.monotonic() + 60
    while True:
        found = [d for d in tmp.glob("accelflow-*") if any(d.glob("beat-*"))]
        if found:
            return found[0]
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


def test_a_cluster_killed_whole_leaves_its_work_dir_to_the_next_job_which_removes_it(
        tmpdir_of_test: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The client, its TaskExecutors and subtasks SIGKILLed at once (the OOM killer, ``kill -9``
    of the process group, a container stopped): nobody is left to clean up. Before, each such
    death left an ``accelflow-*`` directory for ever."""
    script = tmp_path / "job.py"
    script.write_text(SLOW_JOB, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        workdir = _wait_for_subtasks(tmpdir_of_test, proc)
        group = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        psutil.wait_procs(group, timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert [p.name for p in tmpdir_of_test.iterdir()] == [workdir.name]  # no pymp-*: all in there
    assert (workdir / "owner").read_text(encoding="ascii").split()[0] == str(proc.pid)

    caplog.set_level(logging.DEBUG, logger="accelflow.runtime")
    env = Environment({"local.number-taskmanager": 1})
    assert sorted(env.from_sequence(1, 10).map(lambda x: x * 2).execute_and_collect()) == list(range(2, 21, 2))
    assert (f"removed {workdir}: the work directory of a cluster whose process (pid {proc.pid}) died"
            in caplog.text)
    assert list(tmpdir_of_test.iterdir()) == []  # the dead one swept, the job's own removed at its end


class Misbehaves:
    """A map whose attempt 0 SIGKILLs its own subtask, attempt 1 hangs (the watchdog kills it)
    and attempt 2 SIGKILLs its TaskExecutor, each at its first record; attempt 3 runs. Each
    ``open()`` checks that the only entry in ``$TMPDIR`` is the cluster's work directory,
    owned by the client."""

    def __init__(self, tmp: str, client: int, log: str) -> None:
        self.tmp, self.client, self.log = tmp, client, log

    def open(self, ctx: Any) -> None:
        [workdir] = os.listdir(self.tmp)
        with open(os.path.join(self.tmp, workdir, "owner"), encoding="ascii") as f:
            assert f.read().split()[0] == str(self.client)
        self.attempt = ctx.attempt_number
        with open(self.log, "a", encoding="ascii") as f:
            f.write(f"{self.attempt}\n")

    def map(self, record: int) -> int:
        if self.attempt == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.attempt == 1:
            time.sleep(10**6)
        elif self.attempt == 2:
            os.kill(psutil.Process(os.getppid()).ppid(), signal.SIGKILL)  # the forkserver's parent
        return record


def test_a_sigkilled_subtask_a_hung_one_and_a_sigkilled_taskexecutor_leave_nothing(
        tmpdir_of_test: Path, tmp_path: Path) -> None:
    env = Environment({"parallelism.default": 1, "heartbeat.timeout": "1 s", "heartbeat.interval": "100 ms",
                       "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3,
                       "restart-strategy.fixed-delay.delay": "0 s"})
    log = tmp_path / "attempts.log"
    stream = env.from_sequence(1, 10).map(Misbehaves(str(tmpdir_of_test), os.getpid(), str(log)))
    assert sorted(stream.execute_and_collect()) == list(range(1, 11))
    assert log.read_text(encoding="ascii").split() == ["0", "1", "2", "3"]
    assert list(tmpdir_of_test.iterdir()) == []


def tempdir_of(record: int) -> tuple[int, int, str]:
    """The record, this process's pid and multiprocessing's temporary directory here."""
    from multiprocessing import util

    return record, os.getpid(), util.get_temp_dir()


def _gpu_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Environment:
    """One TaskExecutor with one fake GPU, whose warm processes import ``warm_marker``."""
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 1)
    monkeypatch.setenv("WARM_MARKER_LOG", str(tmp_path / "marker.log"))
    return Environment({
        "external-resources": "gpu", "external-resource.gpu.amount": 1,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp_path / "coordination.json"),
        "external-resource.gpu.warm.framework": "none", "external-resource.gpu.warm.preload": "warm_marker",
        "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 s",
    })


def _only_the_work_dir(seen: list[tuple[int, int, str]], tmp: Path) -> set[int]:
    """The pids that ran ``tempdir_of``, once every one had the work directory for its own."""
    assert sorted(r for r, _, _ in seen) == [1, 2, 3, 4, 5]
    [tempdir] = {Path(t) for _, _, t in seen}
    assert tempdir.parent == tmp and tempdir.name.startswith("accelflow-"), tempdir
    assert list(tmp.iterdir()) == []
    return {pid for _, pid, _ in seen}


def test_a_warm_subtask_process_keeps_its_temporary_files_in_the_work_dir(
        tmpdir_of_test: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm process is a fresh interpreter (spawned, not forked): it is told the work
    directory. Before, multiprocessing made it a ``pymp-*`` directory in ``$TMPDIR``, which a
    SIGKILL (its TaskExecutor's death, the OOM killer) left there."""
    env = _gpu_environment(tmp_path, monkeypatch)
    stream = (env.from_sequence(1, 5).map(WhereAmI(str(tmp_path / "where.log")), resources={"gpu": 1})
              .map(tempdir_of, resources={"gpu": 1}))
    pids = _only_the_work_dir(stream.execute_and_collect(), tmpdir_of_test)
    warm = {int(pid) for pid in (tmp_path / "marker.log").read_text(encoding="ascii").split()}
    assert pids <= warm  # attempt 1 ran in a warm process


def test_a_device_host_keeps_its_temporary_files_in_the_work_dir(
        tmpdir_of_test: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device host (``resident=True``) is spawned too."""
    env = _gpu_environment(tmp_path, monkeypatch)
    stream = env.from_sequence(1, 5).map(tempdir_of, resources={"gpu": 1}, resident=True)
    _only_the_work_dir(stream.execute_and_collect(), tmpdir_of_test)


def test_only_work_dirs_whose_owner_died_are_swept(tmpdir_of_test: Path) -> None:
    """A live owner keeps its directory; a dead one's goes, also when its pid now names another
    process (started later: its start time differs); directories without an owner file (being
    made, or not ours) stay."""
    owner = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        live = make_work_dir(sweep=False)
        started = psutil.Process(owner.pid).create_time()
        (live / "owner").write_text(f"{owner.pid} {started:.3f} {pid_namespace()}\n", encoding="ascii")
        reused = make_work_dir(sweep=False)  # this pid is alive, but not the process that made it
        (reused / "owner").write_text(f"{owner.pid} {started - 100:.3f} {pid_namespace()}\n", encoding="ascii")
        elsewhere = make_work_dir(sweep=False)  # its owner's pid is in another PID namespace: unknown here
        (elsewhere / "owner").write_text(f"{owner.pid} {started - 100:.3f} {pid_namespace() + 1}\n", encoding="ascii")
        unowned = tmpdir_of_test / "accelflow-1000"  # as the GPU coordination file's accelflow-<uid>
        unowned.mkdir()
        other = tmpdir_of_test / "pymp-abc"
        other.mkdir()
        assert sweep_work_dirs() == [(reused, owner.pid)]
        assert live.is_dir() and elsewhere.is_dir() and unowned.is_dir() and other.is_dir() and not reused.exists()
    finally:
        owner.communicate(b"")
    assert sweep_work_dirs() == [(live, owner.pid)]
    assert sorted(p.name for p in tmpdir_of_test.iterdir()) == sorted(["accelflow-1000", elsewhere.name, "pymp-abc"])
