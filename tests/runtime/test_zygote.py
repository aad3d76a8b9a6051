"""``local.start-method``: TaskExecutors forked by the client's zygote get what a spawned
TaskExecutor gets (environment, working directory, import path, stdout, hash seed), their
subtasks' forkserver is forked too, and a dead zygote is replaced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from accelflow import Environment
from accelflow.runtime.launchers._zygote import get_zygote, zygote_pids


def _lineage(_: Any) -> dict[str, Any]:
    """Run in a subtask: its forkserver, TaskExecutor and what started that."""
    forkserver = psutil.Process(os.getppid())
    te = forkserver.parent()
    assert te is not None
    return {"forkserver": forkserver.cmdline(), "te": te.pid, "te_parent": te.ppid(),
            "env": os.environ.get("ZYGOTE_TEST_VALUE"), "cwd": os.getcwd(),
            "hash": hash("accelflow"), "argv": te.cmdline()}


def _run(conf: dict[str, Any] | None = None) -> dict[str, Any]:
    out: list[dict[str, Any]] = Environment(conf or {}).from_sequence(1, 1).map(_lineage).execute_and_collect()
    return out[0]


def test_a_taskexecutor_is_forked_by_the_zygote_and_forks_its_forkserver() -> None:
    seen = _run()
    zygote = get_zygote().process.pid
    assert seen["te_parent"] == zygote
    assert psutil.Process(zygote).ppid() == os.getpid()
    zygote_cmdline = psutil.Process(zygote).cmdline()
    assert seen["argv"] == zygote_cmdline  # forked: no interpreter started for it
    assert seen["forkserver"] == zygote_cmdline  # not "-c from multiprocessing.forkserver ..."
    assert _run()["te_parent"] == zygote  # the next job's TaskExecutor comes from the same one


def test_spawn_starts_a_fresh_interpreter_per_taskexecutor() -> None:
    seen = _run({"local.start-method": "spawn"})
    assert seen["te_parent"] == os.getpid()
    assert seen["argv"][1:4] == ["-P", "-m", "accelflow.runtime.taskexecutor"]  # -P: no cwd on sys.path
    assert "multiprocessing.forkserver" in " ".join(seen["forkserver"])


def test_a_forked_taskexecutor_gets_the_clients_environment_and_directory_of_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_zygote()  # running before the client changes anything
    monkeypatch.setenv("ZYGOTE_TEST_VALUE", "set after the zygote started")
    monkeypatch.chdir(tmp_path)
    seen = _run()
    assert seen["env"] == "set after the zygote started"
    assert seen["cwd"] == str(tmp_path)


def test_a_thread_count_set_for_numpy_gets_a_zygote_started_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = get_zygote().process.pid
    threads = "3" if os.environ.get("OMP_NUM_THREADS") != "3" else "4"
    monkeypatch.setenv("OMP_NUM_THREADS", threads)  # read once, when NumPy's BLAS loads
    seen = _run()
    assert seen["te_parent"] != first
    assert psutil.Process(seen["te_parent"]).environ()["OMP_NUM_THREADS"] == threads
    monkeypatch.undo()
    assert _run()["te_parent"] == first  # the first one still serves the first environment


@pytest.mark.parametrize("method", ["zygote", "spawn"])
def test_a_local_environment_starts_its_zygote_before_the_first_job(
    method: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", f"7{method}")  # an environment no zygote has
    before = zygote_pids()
    env = Environment({"local.start-method": method})
    deadline = time.monotonic() + 10
    while method == "zygote" and zygote_pids() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    if method == "spawn":
        time.sleep(0.5)
        assert zygote_pids() == before
        return
    (started,) = zygote_pids() - before  # while the job is still being built
    assert psutil.Process(started).environ()["OPENBLAS_NUM_THREADS"] == "7zygote"
    assert env.from_sequence(1, 1).map(_lineage).execute_and_collect()[0]["te_parent"] == started


def test_a_module_written_after_the_zygote_started_imports_in_a_subtask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_zygote()
    (tmp_path / "zygote_late_module.py").write_text("def triple(x):\n    return 3 * x\n",
                                                    encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import zygote_late_module  # type: ignore[import-not-found]

    # pickled by reference: the subtask imports it from the client's import path
    out = Environment().from_sequence(1, 3).map(zygote_late_module.triple).execute_and_collect()
    assert sorted(out) == [3, 6, 9]


def test_forked_taskexecutors_hash_strings_as_under_pythonhashseed_0() -> None:
    expected = subprocess.run([sys.executable, "-c", "print(hash('accelflow'))"], check=True,
                              capture_output=True, text=True,
                              env=dict(os.environ, PYTHONHASHSEED="0")).stdout.strip()
    assert _run()["hash"] == int(expected)


def _shout(x: int) -> int:
    print(f"subtask says {x}", flush=True)
    return x


def test_output_of_a_forked_taskexecutor_goes_to_the_clients_stdout_of_now(
    capfd: pytest.CaptureFixture[str],
) -> None:
    get_zygote()  # started under another capture than this test's
    Environment().from_sequence(7, 7).map(_shout).execute_and_collect()
    assert "subtask says 7" in capfd.readouterr().out


def test_a_killed_zygote_takes_its_taskexecutors_along_and_the_next_job_gets_a_new_one(
    tmp_path: Path,
) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, threading, time
        import psutil
        from accelflow import Environment
        from accelflow.runtime.launchers._zygote import get_zygote, zygote_pids

        def hold(x):
            time.sleep(60)
            return x

        def run_held():
            try:
                done.append(Environment().from_sequence(1, 1).map(hold).execute_and_collect())
            except Exception as exc:
                done.append(type(exc).__name__)

        print(sorted(Environment().from_sequence(1, 2).map(lambda x: x).execute_and_collect()))
        first = get_zygote().process.pid
        done = []
        threading.Thread(target=run_held, daemon=True).start()
        while len(psutil.Process(first).children()) == 0:
            time.sleep(0.05)
        te = psutil.Process(first).children()[0]
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while te.is_running() and te.status() != psutil.STATUS_ZOMBIE:  # SIGTERM: its parent died
            assert time.monotonic() < deadline, "the TaskExecutor outlived its zygote"
            time.sleep(0.05)
        while not done:
            time.sleep(0.05)
        print(done[0])
        print(sorted(Environment().from_sequence(1, 2).map(lambda x: x).execute_and_collect()))
        print(get_zygote().process.pid != first)
    """), encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["[1, 2]", "JobError", "[1, 2]", "True"], out.stderr


def test_the_zygote_ignores_ctrl_c_and_signals_reach_only_its_own_children() -> None:
    zygote = get_zygote()
    os.kill(zygote.process.pid, signal.SIGINT)
    zygote.signal(os.getpid(), signal.SIGTERM)  # not one of its children: nothing happens
    assert _run()["te_parent"] == zygote.process.pid
