"""File sinks (``sink_to_file``, a ``SingleFileSink``) attacked through their directory:
planted symlinks, two jobs on one target, a SIGKILLed client. The target's directory is
writable by whoever plants files there."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from runtime_jobs import GatedNumbers

from accelflow import Environment, JobError
from accelflow.connectors._file_parts import create_part, holding, remove_stale_parts

N = 40
VICTIM_TEXT = "the victim's own data\n"
CONF = {"taskmanager.numberOfTaskSlots": 4}


def _wait_until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _parts(directory: Path, base: str) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.startswith(f".{base}.part-")}


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT, encoding="utf-8")
    victim.chmod(0o640)
    return victim


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def _gated_job(target: Path, gate: Path, name: str) -> Iterator[Any]:
    """A job writing ``0..N-1`` to ``target`` in 2 parts; it ends after the ``with`` block."""
    env = Environment(CONF)
    env.from_source(GatedNumbers(N, str(gate)), parallelism=2).sink_to_file(target, parallelism=2)
    client = env.execute_async(name)
    try:
        yield client
    finally:
        gate.touch()
        client.wait(30)


# -- planted symlinks ---------------------------------------------------------------------------
def test_symlinks_planted_at_the_old_predictable_names_leave_the_victim_untouched(tmp_path: Path) -> None:
    victim, target = _victim(tmp_path), tmp_path / "out.txt"
    planted = [tmp_path / f".out.txt.part-{i}.attempt-0.tmp" for i in range(2)]
    planted.append(tmp_path / f"out.txt.tmp-{os.getpid()}")  # the JobManager's (this process) temp
    for link in planted:
        link.symlink_to(victim)
    target.symlink_to(victim)  # the rename replaces the link itself

    env = Environment(CONF)
    env.from_sequence(1, 10, parallelism=2).sink_to_file(target, parallelism=2)
    env.execute("planted")

    assert victim.read_text(encoding="utf-8") == VICTIM_TEXT
    assert stat.S_IMODE(victim.stat().st_mode) == 0o640
    assert not target.is_symlink()
    assert sorted(target.read_text(encoding="utf-8").split()) == sorted(str(x) for x in range(1, 11))
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()  # as open(target, "w") would
    assert all(link.is_symlink() and link.resolve() == victim for link in planted)  # not ours: left alone
    assert _parts(tmp_path, "out.txt") == {p.name for p in planted if p.name.startswith(".")}
    assert not (tmp_path / ".out.txt.accelflow-lock").exists()


def test_a_symlink_planted_at_the_lock_file_fails_the_job_naming_it(tmp_path: Path) -> None:
    victim, target = _victim(tmp_path), tmp_path / "out.txt"
    lock = tmp_path / ".out.txt.accelflow-lock"
    lock.symlink_to(victim)
    env = Environment(CONF)
    env.from_sequence(1, 10).sink_to_file(target)
    with pytest.raises(JobError, match=rf"^file sink '{re.escape(str(target))}': cannot open its lock file "
                                       rf"'{re.escape(str(lock))}': it is a symlink\. Remove it"):
        env.execute("planted lock")
    assert victim.read_text(encoding="utf-8") == VICTIM_TEXT
    assert not target.exists()
    assert _parts(tmp_path, "out.txt") == set()


def test_parts_are_new_private_files_with_random_names(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    (tmp_path / ".out.txt.part-0.attempt-0.tmp").symlink_to(_victim(tmp_path))
    fd1, first = create_part(str(target), 0, 0)
    fd2, second = create_part(str(target), 0, 0)
    os.close(fd1)
    os.close(fd2)
    assert first != second
    for part in (first, second):
        assert Path(part).parent == tmp_path and Path(part).name.startswith(".out.txt.part-0.attempt-0.")
        st = os.lstat(part)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert (tmp_path / "victim").read_text(encoding="utf-8") == VICTIM_TEXT


def test_stale_part_removal_touches_only_this_users_own_part_files(tmp_path: Path) -> None:
    target, victim = tmp_path / "out.txt", _victim(tmp_path)
    fd, ours = create_part(str(target), 1, 2)
    os.close(fd)
    fd, other_target = create_part(str(tmp_path / "out.txt.part-9"), 0, 0)  # another sink's live part
    os.close(fd)
    link = tmp_path / ".out.txt.part-0.attempt-0.abcdefgh.tmp"
    link.symlink_to(victim)
    unrelated = tmp_path / ".out.txt.part-notes.tmp"
    unrelated.write_text("mine", encoding="utf-8")

    remove_stale_parts(str(target))

    assert not Path(ours).exists()
    assert Path(other_target).exists() and link.is_symlink() and unrelated.exists()
    assert victim.read_text(encoding="utf-8") == VICTIM_TEXT


# -- two jobs on one target ---------------------------------------------------------------------
def test_a_second_job_on_a_target_being_written_fails_naming_it(tmp_path: Path) -> None:
    gate, target = tmp_path / "gate", tmp_path / "out.txt"
    with _gated_job(target, gate, "first"):
        _wait_until(lambda: len(_parts(tmp_path, "out.txt")) == 2, "the first job's part files")
        live = _parts(tmp_path, "out.txt")
        for part in live:
            assert stat.S_IMODE((tmp_path / part).stat().st_mode) == 0o600

        second = Environment(CONF)
        second.from_sequence(1, 3).sink_to_file(target)
        with pytest.raises(JobError, match=rf"^file sink '{re.escape(str(target))}' is being written by another "
                                           rf"running job \(process {os.getpid()}\) \(it holds "
                                           r"'.*\.out\.txt\.accelflow-lock'\)\. Wait for that job to end"):
            second.execute("second")
        assert _parts(tmp_path, "out.txt") == live  # the failed job's clean-up left them alone
    assert sorted(int(x) for x in target.read_text(encoding="utf-8").split()) == list(range(N))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate", "out.txt"]


def test_the_target_lock_is_exclusive_between_threads_and_reentrant_in_one(tmp_path: Path) -> None:
    target = str(tmp_path / "out.txt")
    errors: list[BaseException] = []

    def other() -> None:
        try:
            with holding(target):
                pass
        except BaseException as exc:
            errors.append(exc)

    with holding(target):
        with holding(target):  # re-entrant: two sinks of one job on one target
            pass
        assert (tmp_path / ".out.txt.accelflow-lock").exists()
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert len(errors) == 1 and isinstance(errors[0], JobError)
    assert "is being written by another running job" in str(errors[0])
    assert not (tmp_path / ".out.txt.accelflow-lock").exists()
    with holding(target):  # free again
        pass


# -- a SIGKILLed client -------------------------------------------------------------------------
_CLIENT_SCRIPT = """
    import os, sys, time
    from accelflow import Environment
    from runtime_jobs import GatedNumbers

    target, gate = sys.argv[1], sys.argv[2]
    env = Environment({"taskmanager.numberOfTaskSlots": 4})
    env.from_source(GatedNumbers(40, gate), parallelism=2).sink_to_file(target, parallelism=2)
    client = env.execute_async("killed")
    base = ".%s.part-" % os.path.basename(target)
    while len([n for n in os.listdir(os.path.dirname(target)) if n.startswith(base)]) < 2:
        time.sleep(0.01)
    print("RUNNING", flush=True)
    client.wait()
"""


@pytest.mark.slow
def test_parts_of_a_sigkilled_client_are_removed_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target, script = out / "out.txt", tmp_path / "job.py"
    script.write_text(textwrap.dedent(_CLIENT_SCRIPT), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    client = subprocess.Popen(
        [sys.executable, str(script), str(target), str(tmp_path / "never")], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, start_new_session=True,
    )
    try:
        assert client.stdout is not None
        assert client.stdout.readline().decode().strip() == "RUNNING"
        cluster = psutil.Process(client.pid).children(recursive=True)
        # its subtasks too, stopped first: one that saw its client go would remove its part
        processes = [psutil.Process(client.pid), *cluster]
        for send in (psutil.Process.suspend, psutil.Process.kill):
            for process in processes:
                try:
                    send(process)
                except psutil.NoSuchProcess:
                    pass
        client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    _, alive = psutil.wait_procs(cluster, timeout=15)
    assert alive == []
    dead = _parts(out, "out.txt")
    assert len(dead) == 2  # a SIGKILLed process cannot clean up: the next run must

    with _gated_job(target, tmp_path / "gate", "next"):
        _wait_until(lambda: len(_parts(out, "out.txt") - dead) == 2, "the next run's part files")
        assert _parts(out, "out.txt") & dead == set()  # removed when the next run took the target
    assert sorted(int(x) for x in target.read_text(encoding="utf-8").split()) == list(range(N))
    assert sorted(p.name for p in out.iterdir()) == ["out.txt"]
