"""Standby subtasks (issue 28.2): opened ahead on spare devices, one takes a failed subtask's
index at once, a new one is deployed in the background, a failed standby is just replaced,
and a job whose standbys do not fit runs without them and says so; several subtasks failing at
once take one standby each (real processes, fake GPUs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from failover_jobs import Counted, Model, calls, opens, published

from accelflow import Environment
from accelflow.connectors.files import FileSink

N = 2000


def _job(conf: dict[str, Any], tmp_path: Path, model: Model, parallelism: int = 3, delay: float = 0.01) -> Environment:
    env = Environment({**conf, "parallelism.default": parallelism, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": 1})
    (env.from_source(Counted(N, chunk=10, delay=delay), name="numbers")
        .map_batches(model, batch_size=10, name="model", resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def _opened(tmp_path: Path) -> list[tuple[int, int, int]]:
    seen = opens(tmp_path)
    assert max(Counter(pid for pid, _, _ in seen).values()) == 1, seen  # every process opened once
    return seen


def test_a_standby_takes_the_failed_subtasks_place_and_another_is_deployed(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # after the kill, the batches wait for the next standby's open(): it waits for the killed
    # subtask's devices (``DevicesFree``), and the job must not end before
    model = Model(tmp_path, batch_s=0.01, fail="kill", at=1200, opens_after=5)
    client = _job(gpu_conf, tmp_path, model).execute_async("standby")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.standby == "model -> files (standby 1 of 1)"
    assert failover.replaced == ["model -> files (2/3)"] and len(failover.rolled_back) == 5
    # 3 subtasks and a standby opened first; then only the next standby (no replacement)
    assert [index for _, index, _ in _opened(tmp_path)][-1] == -1 and len(opens(tmp_path)) == 5
    standby_pid = next(pid for pid, index, _ in opens(tmp_path) if index == -1)
    assert any(pid == standby_pid for _, pid, index, _ in calls(tmp_path) if index == 1)  # it worked as 2/3
    # its sink opened when it took over, as subtask 2/3: FileSink names its parts by subtask index
    assert {p.name.split("-")[2] for p in (tmp_path / "out").glob("part-*")} == {"0", "1", "2"}
    assert job.standby_missing == {}


def test_a_failed_standby_is_replaced_without_a_restart(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # the kill waits for the failed standby's replacement to be open (3 + 1 + 1 opens: it
    # waited for the failed one's devices, ``DevicesFree``), while the sources still read
    model = Model(tmp_path, batch_s=0.01, fail="kill", at=1200, fail_open="standby", opens_first=5)
    client = _job(gpu_conf, tmp_path, model, delay=0.03).execute_async("standby fails")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    assert result.attempts == 2 and len(job.failovers) == 1  # the standby's failure restarted nothing
    assert job.failovers[0].standby is not None
    assert len(_opened(tmp_path)) == 3 + 1 + 1 + 1  # the failed standby, its replacement, the next one


def test_a_job_whose_standbys_do_not_fit_runs_without_them_and_says_why(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    client = _job(gpu_conf, tmp_path, Model(tmp_path), parallelism=4).execute_async("no room")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    [(chain, why)] = job.standby_missing.items()
    assert chain == "model -> files" and why.startswith("cannot place")
    assert len(opens(tmp_path)) == 4


def _xid_on_two(conf: dict[str, Any], tmp_path: Path, standbys: int) -> tuple[Any, Any, set[str], list[int]]:
    """numbers -> model ({"gpu": 0.5}, 4 subtasks) -> files with ``standbys`` standbys; once
    they are all open and a checkpoint completed, a hardware Xid fails the 2 models sharing
    the GPU of model 1/4 at once. The job's client and record, the failed subtasks' names and
    the pids that opened the model before the failure."""
    env = Environment({**conf, "parallelism.default": 4, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": standbys})
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.01), batch_size=10, name="model", resources={"gpu": 0.5})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async(f"xid, {standbys} standbys")
    deadline = time.monotonic() + 60
    while (job := next(iter(client.jobmanager.jobs.values()), None)) is None or \
            len(opens(tmp_path)) < 4 + standbys or job.checkpoints.completed < 1 or \
            sum(st.state == "STANDBY" for st in client.jobmanager.state.subtasks.values()) < standbys:
        assert time.monotonic() < deadline, "the job and its standbys did not run in time"
        time.sleep(0.01)
    held = {st.name: (st.taskexecutor, st.devices["gpu"][0][0]) for st in client.jobmanager.state.subtasks.values()
            if st.key.job_id == job.id and st.devices.get("gpu") and "standby" not in st.name}
    on_gpu = {name for name, where in held.items() if where == held["model -> files (1/4)"]}
    assert len(on_gpu) == 2, held
    before = [pid for pid, _, _ in opens(tmp_path)]
    client.jobmanager.inject_fault(*held["model -> files (1/4)"], 79)
    return client, job, on_gpu, before


def _indexes(names: set[str]) -> set[int]:
    """``{"model -> files (2/4)", ...}`` -> ``{1, ...}``."""
    return {int(name.split("(")[-1].split("/")[0]) - 1 for name in names}


def test_two_failures_at_once_move_to_two_standbys(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    client, job, failed, before = _xid_on_two(gpu_conf, tmp_path, standbys=2)
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))  # none lost, none twice
    [failover] = job.failovers
    assert failover.path == "in-place" and sorted(failover.replaced) == sorted(failed)
    assert failover.standby == "model -> files (standby 1 of 2), model -> files (standby 2 of 2)"
    _opened(tmp_path)  # no process opened twice: the survivors were not opened again
    standby_pids = {pid for pid, index, _ in opens(tmp_path) if index == -1 and pid in before}
    assert len(standby_pids) == 2  # opened before the failure
    worked = {index for _, pid, index, _ in calls(tmp_path) if pid in standby_pids}
    assert worked == _indexes(failed)  # each standby took one failed index
    # no replacement was opened: every later open() is a new standby's (no index yet)
    assert all(index == -1 for pid, index, _ in opens(tmp_path) if pid not in before)
    assert result.attempts == 2


def test_two_failures_at_once_with_one_standby_move_one_and_replace_the_other(gpu_conf: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    client, job, failed, before = _xid_on_two(gpu_conf, tmp_path, standbys=1)
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))
    [failover] = job.failovers
    assert failover.path == "in-place" and sorted(failover.replaced) == sorted(failed)
    assert failover.standby == "model -> files (standby 1 of 1)"
    _opened(tmp_path)
    replacements = [index for pid, index, _ in opens(tmp_path) if pid not in before and index >= 0]
    assert len(replacements) == 1 and set(replacements) < _indexes(failed)  # of the index left
    assert result.attempts == 2


def test_two_subtasks_sigkilled_together_move_to_two_standbys(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    env = Environment({**gpu_conf, "parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": 2})
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.01), batch_size=10, name="model", resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("two killed")
    deadline = time.monotonic() + 60
    while (job := next(iter(client.jobmanager.jobs.values()), None)) is None or len(opens(tmp_path)) < 4 or \
            job.checkpoints.completed < 1 or \
            sum(st.state == "STANDBY" for st in client.jobmanager.state.subtasks.values()) < 2:
        assert time.monotonic() < deadline, "the job and its standbys did not run in time"
        time.sleep(0.01)
    before = opens(tmp_path)
    for pid in [pid for pid, index, _ in before if index >= 0]:
        os.kill(pid, signal.SIGKILL)
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))
    [failover] = job.failovers
    assert failover.path == "in-place" and sorted(failover.replaced) == ["model -> files (1/2)", "model -> files (2/2)"]
    assert failover.standby == "model -> files (standby 1 of 2), model -> files (standby 2 of 2)"
    _opened(tmp_path)
    assert all(index == -1 for _, index, _ in opens(tmp_path)[4:])  # no replacement: new standbys only
    assert result.attempts == 2


PROBE_JOB = """\
import os, signal, sys, time
from pathlib import Path
from accelflow import Environment

logs = Path(sys.argv[1])


def note(name, ctx):
    with open(logs / name, "a") as f:
        f.write(f"{os.getpid()} {ctx.index_of_this_subtask} {ctx.is_standby()}\\n")


def opened(n):  # until n open() calls happened
    while len((logs / "opens.log").read_text().splitlines()) < n:
        time.sleep(0.01)


class Probe:
    # picks its shard by index, as PyFlink users do in open()
    def open(self, ctx):
        self.ctx = ctx
        note("opens.log", ctx)

    def map_batch(self, batch):
        time.sleep(0.01)
        if self.ctx.index_of_this_subtask == 0 and batch.max() > 400:
            try:
                os.close(os.open(logs / "killed", os.O_CREAT | os.O_EXCL))
                opened(3)  # the standby is open
                os.kill(os.getpid(), signal.SIGKILL)
            except FileExistsError:  # after the kill: until the next standby is open
                opened(4)
        note("calls.log", self.ctx)
        return batch


env = Environment({"parallelism.default": 2, "restart-strategy": "fixed-delay",
                   "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": 1,
                   "external-resources": "gpu", "external-resource.gpu.amount": 3,
                   "external-resource.gpu.driver-factory.class": "gpu", "taskmanager.numberOfTaskSlots": 4,
                   "external-resource.gpu.param.coordination-file": str(logs / "coordination.json")})
out = env.from_sequence(1, 2000).map_batches(Probe(), batch_size=16, resources={"gpu": 1}, name="model")
print(len(out.execute_and_collect()))
"""


def _lines(path: Path) -> list[tuple[int, int, bool]]:
    return [(int(pid), int(index), standby == "True") for pid, index, standby in
            (line.split() for line in path.read_text().splitlines())]


def test_a_standby_opens_without_an_index_and_maps_with_the_one_it_took_without_a_warning(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    """``accelflow run``: a standby's ``open()`` sees index -1 and ``is_standby()``, its
    ``map_batch`` the index it took over; the next standby, placed once the killed subtask's GPU
    is free, is not reported missing."""
    script = tmp_path / "job.py"
    script.write_text(PROBE_JOB, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "accelflow", "run", str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2000"
    assert "survivors, replaced model -> collect (1/2) (by standby model -> collect (standby 1 of 1))" \
        in done.stderr, done.stderr
    assert "standby subtask" not in done.stderr.replace("(by standby", ""), done.stderr  # no "runs without"
    opened = _lines(tmp_path / "opens.log")
    # subtasks 1/2 and 2/2, the standby, and the next one after it took over
    assert sorted((index, standby) for _, index, standby in opened) == [(-1, True), (-1, True), (0, False), (1, False)]
    standbys = {pid for pid, index, _ in opened if index == -1}
    took = {(index, standby) for pid, index, standby in _lines(tmp_path / "calls.log") if pid in standbys}
    assert took == {(0, False)}  # it works as subtask 1/2, no longer a standby
