"""Failures on the real multi-process cluster: a killed TaskExecutor, restarts, cancellation,
a crashed or interrupted client, and user code that raises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from runtime_jobs import (
    BrokenSplits, FailFirstAttempt, FailInOpen, Forever, GatedNumbers, JournaledMap, ProbeJson, fail_on,
)

from accelflow import Environment, JobCancelledError, JobClient, JobError

N = 40


def _coordination(conf: dict[str, Any]) -> list[dict[str, Any]]:
    path = Path(conf["external-resource.gpu.param.coordination-file"])
    return json.loads(path.read_text(encoding="utf-8"))["allocations"]  # type: ignore[no-any-return]


def _wait_until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _sources_running(client: JobClient, count: int) -> bool:
    if client.status() in ("FAILED", "FINISHED", "CANCELED"):
        raise AssertionError(f"the job ended early: {client.status()}")
    started = [
        st for st in list(client.jobmanager.subtasks.values())
        if st.name.startswith("GatedNumbers") and st.counts and st.counts[0][1] > 0
    ]
    return len(started) >= count


def _gated_gpu_job(conf: dict[str, Any], tmp_path: Path) -> tuple[JobClient, Path, Path]:
    gate, target = tmp_path / "gate", tmp_path / "out.jsonl"
    env = Environment(conf)
    (
        env.from_source(GatedNumbers(N, str(gate)), parallelism=4)
        .map(ProbeJson, name="classify", parallelism=4, resources={"gpu": 1})
        .sink_to_file(target)
    )
    client = env.execute_async("gated")
    _wait_until(lambda: _sources_running(client, 4), "every source subtask to emit")
    return client, gate, target


def _kill_taskexecutor(client: JobClient, te_id: str) -> int:
    pid = client.jobmanager.taskexecutors[te_id].registration.pid
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.slow
def test_a_killed_taskexecutor_fails_the_job_naming_it(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    client, gate, target = _gated_gpu_job(gpu_conf, tmp_path)
    assert any(p.name.startswith(".out.jsonl.part-") for p in tmp_path.iterdir())  # parts being written
    dead = _kill_taskexecutor(client, "taskexecutor-2")
    with pytest.raises(JobError, match=r"^taskexecutor-2 died while running job-1 \(gated\)"):
        client.wait(30)
    assert client.status() == "FAILED"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "gpu-coordination.json", "gpu-coordination.json.lock"]
    # the survivor gave its GPUs back; only the killed TaskExecutor's records remain, and they
    # name a dead process, so the next TaskExecutor on this host reclaims them
    assert {a["owner"]["pid"] for a in _coordination(gpu_conf)} <= {dead}
    assert not psutil.pid_exists(dead)
    assert not client.launcher.workdir.exists()


@pytest.mark.slow
def test_a_killed_taskexecutor_is_replaced_and_the_job_restarts(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    conf = dict(gpu_conf, **{"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0.1 s"})
    client, gate, target = _gated_gpu_job(conf, tmp_path)
    _kill_taskexecutor(client, "taskexecutor-2")
    gate.touch()  # attempt 0 cannot finish without taskexecutor-2; attempt 1 runs straight through
    result = client.wait(60)
    assert result.attempts == 2
    records = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["record"] for r in records) == list(range(N))  # complete, no duplicates
    assert {r["attempt"] for r in records} == {1}
    assert len({r["infos"][0][1] for r in records}) == 4  # the new TaskExecutor reclaimed 2 GPUs
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bin", "gate", "gpu-coordination.json", "gpu-coordination.json.lock", "out.jsonl",
    ]
    assert _coordination(conf) == []


def test_a_user_exception_fails_the_job_naming_operator_and_subtask(fpga_conf: dict[str, Any], tmp_path: Path) -> None:
    env = Environment(fpga_conf)
    env.from_sequence(1, 10, parallelism=2).map(fail_on(7), name="checker", parallelism=2).sink_to_file(tmp_path / "out")
    with pytest.raises(JobError) as info:
        env.execute("validate")
    text = str(info.value)
    first = text.splitlines()[0]
    assert "checker" in first and "(2/2)" in first and "taskexecutor-1" in first
    assert "Traceback (most recent call last):" in text
    assert 'runtime_jobs.py", line' in text and "in check" in text  # the user's frame
    assert text.rstrip().endswith("ValueError: bad record 7")
    assert list(tmp_path.iterdir()) == []  # no output, no part files


def test_an_existing_file_survives_a_failed_job_unchanged(fpga_conf: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("previous results\n", encoding="utf-8")
    env = Environment(fpga_conf)
    env.from_sequence(1, 3000).map(fail_on(2500)).sink_to_file(target)
    with pytest.raises(JobError, match="bad record 2500"):
        env.execute()
    assert target.read_text(encoding="utf-8") == "previous results\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failing_open_fails_the_job_and_closes_what_was_opened(fpga_conf: dict[str, Any], tmp_path: Path) -> None:
    env = Environment(fpga_conf)
    env.from_sequence(1, 3).map(JournaledMap(str(tmp_path))).map(FailInOpen(), name="load model").add_sink(lambda x: None)
    with pytest.raises(JobError, match=r"(?s)load model.*OSError: no model file for subtask 0"):
        env.execute()
    assert (tmp_path / "map-0.log").read_text(encoding="utf-8").splitlines()[1:] == ["close map"]


def test_restart_strategy_retries_a_failed_subtask(fpga_conf: dict[str, Any]) -> None:
    conf = dict(fpga_conf, **{"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "10 ms"})
    env = Environment(conf)
    out = env.from_sequence(0, 99, parallelism=2).map(FailFirstAttempt(42), parallelism=2).execute_and_collect()
    assert sorted(out) == [(i, 1) for i in range(100)]
    assert env.last_result.attempts == 2


def test_restarts_run_out(fpga_conf: dict[str, Any]) -> None:
    conf = dict(fpga_conf, **{"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 1,
                              "restart-strategy.fixed-delay.delay": "10 ms"})
    env = Environment(conf)
    with pytest.raises(JobError, match="ValueError: bad record 3"):
        env.from_sequence(0, 9).map(fail_on(3)).execute_and_collect()


def test_cancelling_an_unbounded_job(fpga_conf: dict[str, Any]) -> None:
    env = Environment(fpga_conf)
    env.from_source(Forever(), parallelism=2).key_by(lambda x: x % 3).sum().add_sink(lambda x: None)
    client = env.execute_async("forever")
    _wait_until(lambda: (client.jobmanager.progress(client.graph)["records"] or 0) > 500, "records to flow")
    assert client.status() == "RUNNING"
    assert client.jobmanager.progress(client.graph)["total"] is None  # unbounded: no total
    client.cancel()
    with pytest.raises(JobCancelledError, match="job-1 \\(forever\\) was cancelled"):
        client.wait(30)
    assert client.status() == "CANCELED"
    assert not client.launcher.workdir.exists()


_CLIENT_SCRIPT = """
    import json, sys, time
    from accelflow import Environment
    from runtime_jobs import Forever, Probe

    env = Environment(json.loads(sys.argv[1]))
    env.from_source(Forever(), parallelism=2).map(Probe, parallelism=2, resources={"gpu": 1}).add_sink(lambda x: None)
    client = env.execute_async()
    while not client.jobmanager.progress(client.graph)["records"]:
        time.sleep(0.01)
    print("RUNNING", client.launcher.workdir, flush=True)
    client.wait()
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "crash"])
def test_an_interrupted_or_crashed_client_leaves_no_process_and_no_gpu_held(
    how: str, gpu_conf: dict[str, Any], tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(_CLIENT_SCRIPT), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    client = subprocess.Popen(
        [sys.executable, str(script), json.dumps(gpu_conf)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, start_new_session=True,
    )
    try:
        assert client.stdout is not None
        running, workdir = client.stdout.readline().decode().split()
        assert running == "RUNNING" and Path(workdir).is_dir()
        cluster = psutil.Process(client.pid).children(recursive=True)
        assert len(cluster) >= 4  # 2 TaskExecutors, their forkservers, subtasks
        if how == "ctrl-c":
            os.killpg(client.pid, signal.SIGINT)  # what a terminal sends to the foreground group
        else:
            client.kill()
        _, stderr = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    if how == "ctrl-c":
        assert b"KeyboardInterrupt" in stderr
    gone, alive = psutil.wait_procs(cluster, timeout=15)
    assert alive == []
    assert _coordination(gpu_conf) == [], stderr.decode()  # every TaskExecutor gave its GPUs back
    assert not Path(workdir).exists()  # nor is the client's working directory left behind


def test_a_function_that_cannot_be_pickled_is_named(fpga_conf: dict[str, Any]) -> None:
    lock = threading.Lock()
    env = Environment(fpga_conf)
    env.from_sequence(1, 3).map(lambda x: (lock, x)[1], name="guarded").add_sink(lambda x: None)
    with pytest.raises(JobError, match=r"^the function of operator 'guarded' \(map\) cannot be sent to its subtasks: "
                                       r"TypeError: cannot pickle '_thread.lock' object\. .*in open\(\) of a rich function"):
        env.execute()


def test_a_source_whose_splits_fail_is_named(fpga_conf: dict[str, Any]) -> None:
    env = Environment(fpga_conf)
    env.from_source(BrokenSplits(), name="shards").add_sink(lambda x: None)
    with pytest.raises(JobError, match=r"^source 'shards': create_splits\(1\) raised FileNotFoundError: /data/shards"):
        env.execute()
