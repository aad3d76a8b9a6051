"""``sink_to_file`` is exactly once across failovers (review 7, finding 1): a checkpoint names
the part files a sink subtask sealed up to it, a restored subtask keeps them and writes only
the records after it, and the target holds every record once, whichever way the job carried
on: a full restart (through ``accelflow run``, as the review's ``sinkloss.py``, and with
``execution.failover.in-place: false``), a rollback in place after a raise, a SIGKILLed
subtask, a standby taking over, a hardware Xid, a SIGKILLed device host, a subtask rewound
after its input ended, and a stop-with-savepoint resumed by another job (also with fewer sink
subtasks); real processes. The last tests drive the sink's restore in one process."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model
from sink_file_jobs import FailOnceAfterACheckpoint

from accelflow import CheckpointError, Environment, RuntimeContext
from accelflow.connectors import SingleFileSink
from accelflow.testing import use_fake_nvidia_smi

N = 3000


def _lines(target: Path) -> list[int]:
    return sorted(int(line) for line in target.read_text(encoding="utf-8").splitlines())


def _conf(tmp_path: Path, parallelism: int, **extra: Any) -> dict[str, Any]:
    return {"parallelism.default": parallelism, "execution.checkpointing.interval": "100 ms",
            "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
            "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s", **extra}


_SCRIPT = """
    import sys
    from accelflow import Environment
    from failover_jobs import Counted
    from sink_file_jobs import FailOnceAfterACheckpoint

    work, n = sys.argv[1], int(sys.argv[2])
    env = Environment({"execution.checkpointing.interval": "100 ms", "parallelism.default": 1,
                       "execution.checkpointing.dir": work + "/checkpoints",
                       "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(n, chunk=16, delay=0.005))
        .map_batches(FailOnceAfterACheckpoint(work, at=n // 3), batch_size=16, name="flaky")
        .sink_to_file(work + "/out/out.txt"))
    env.execute("sinkloss")
"""


def test_a_full_restart_from_a_checkpoint_keeps_what_it_names(tmp_path: Path) -> None:
    """The review's ``sinkloss.py file``: one chain of parallelism 1 raises once after a
    checkpoint (no survivor: a full restart), and ``accelflow run`` exits 0."""
    (tmp_path / "out").mkdir()
    script = tmp_path / "sinkloss.py"
    script.write_text(textwrap.dedent(_SCRIPT), encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"},
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    done = subprocess.run([str(Path(sys.executable).parent / "accelflow"), "run", "--no-progress", str(script),
                           str(tmp_path), str(N)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "failed").exists() and "full restart" in done.stderr, done.stderr[-3000:]
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["out.txt"]  # no part left


def _failing_job(tmp_path: Path, how: str, **conf: Any) -> tuple[Any, Any]:
    env = Environment(_conf(tmp_path, 2, **conf))
    (env.from_source(Counted(N, chunk=16, delay=0.005))
        .map_batches(FailOnceAfterACheckpoint(tmp_path, at=N // 3, how=how), batch_size=16, name="flaky")
        .sink_to_file(tmp_path / "out" / "out.txt"))
    client = env.execute_async(f"sink {how}")
    result = client.wait(180)
    return result, client.jobmanager.jobs[result.job_id]


def test_a_rollback_in_place_after_a_raise_keeps_what_the_checkpoint_names(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    result, job = _failing_job(tmp_path, "raise")
    assert (tmp_path / "failed").exists() and result.attempts == 2
    assert [f.path for f in job.failovers] == ["in-place"]  # the other subtask rolled back in place
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["out.txt"]


def test_a_sigkilled_subtask_loses_nothing(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    result, job = _failing_job(tmp_path, "kill")
    assert (tmp_path / "failed").exists() and result.attempts == 2 and len(job.failovers) == 1
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["out.txt"]


def test_a_full_restart_of_every_subtask_keeps_what_the_checkpoint_names(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    result, job = _failing_job(tmp_path, "raise", **{"execution.failover.in-place": False})
    assert (tmp_path / "failed").exists() and result.attempts == 2
    assert [f.path for f in job.failovers] == ["full"]
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))


def test_a_subtask_whose_input_had_ended_rolls_back_in_place_and_writes_on(tmp_path: Path) -> None:
    """Subtask 2/2 reads all its input (its sink's input ends) before 1/2 raises: rewound in
    place, its sink is opened again and must take the replayed records, not only its end."""
    (tmp_path / "out").mkdir()
    env = Environment(_conf(tmp_path, 2))
    (env.from_source(Counted(2000, chunk=20, delay=0.05, ended=tmp_path))
        .map_batches(Model(tmp_path, fail="raise", at=700, ended_first=1), batch_size=20, name="model")
        .sink_to_file(tmp_path / "out" / "out.txt"))
    client = env.execute_async("ended")
    result = client.wait(180)
    [failover] = client.jobmanager.jobs[result.job_id].failovers  # one failure, one rollback
    assert failover.path == "in-place" and result.attempts == 2
    assert _lines(tmp_path / "out" / "out.txt") == list(range(2000))


def _savepoint_job(tmp_path: Path, parallelism: int, **conf: Any) -> Environment:
    env = Environment(_conf(tmp_path, parallelism, **{"execution.checkpointing.interval": "1 h", **conf}))
    (env.from_source(Counted(N, chunk=10, delay=0.01), parallelism=2)
        .map_batches(Model(tmp_path), batch_size=10, name="model")
        .sink_to_file(tmp_path / "out" / "out.txt"))
    return env


def _stopped_with_a_savepoint(tmp_path: Path) -> str:
    """Run the job with 2 sink subtasks, stop it with a savepoint once it wrote some records;
    the savepoint's path."""
    client = _savepoint_job(tmp_path, 2).execute_async("stopped")
    calls = tmp_path / "calls.log"
    while not calls.exists() or len(calls.read_text().splitlines()) < 20:
        assert client.status() not in ("FAILED", "FINISHED", "CANCELED"), "ended before the stop"
        time.sleep(0.01)
    [job_id] = client.jobmanager.jobs
    savepoint: str = client.jobmanager.trigger_savepoint(job_id, str(tmp_path / "savepoints"), stop=True).result(60)
    client.wait(60)
    assert not (tmp_path / "out" / "out.txt").exists()  # a stopped job publishes nothing
    return savepoint


def test_a_job_resumed_from_a_stop_with_savepoint_writes_every_record_once(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    savepoint = _stopped_with_a_savepoint(tmp_path)
    _savepoint_job(tmp_path, 2, **{"execution.state-recovery.path": savepoint}).execute("resumed")
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["out.txt"]


def test_a_savepoint_resumed_with_fewer_sink_subtasks_keeps_every_subtasks_parts(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    savepoint = _stopped_with_a_savepoint(tmp_path)
    _savepoint_job(tmp_path, 1, **{"execution.state-recovery.path": savepoint}).execute("resumed")
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))


def test_a_hardware_xid_under_a_sink_subtask_keeps_what_the_checkpoint_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device of the sink's chain falls off the bus (the drill of an NVML event): the
    subtask moves to the other GPU and goes on from the latest checkpoint."""
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 2)
    (tmp_path / "out").mkdir()
    env = Environment(_conf(tmp_path, 1, **{
        "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2, "external-resources": "gpu",
        "external-resource.gpu.amount": 2, "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp_path / "coordination.json")}))
    (env.from_source(Counted(N, chunk=20, delay=0.01), name="numbers")
        .map(int, name="model", resources={"gpu": 1})
        .sink_to_file(tmp_path / "out" / "out.txt"))
    client = env.execute_async("xid")
    while not (jobs := list(client.jobmanager.jobs.values())) or jobs[0].checkpoints.completed < 2:
        assert client.status() not in ("FAILED", "FINISHED"), client.status()
        time.sleep(0.02)
    [gpu] = [r["address"] for r in client.jobmanager.ledger.statistics() if r["holders"]]
    client.jobmanager.inject_fault("taskexecutor-1", gpu, 79)
    result = client.wait(120)
    assert result.attempts == 2 and [f.path for f in jobs[0].failovers] == ["in-place"]
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))


def test_a_sigkilled_device_host_of_a_resident_model_loses_nothing(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    """The review's ``share.py good``: the device host running a resident model dies (here the
    model SIGKILLs its own process, the host) after a checkpoint."""
    (tmp_path / "out").mkdir()
    env = Environment({**gpu_conf, **_conf(tmp_path, 1)})
    (env.from_source(Counted(N, chunk=16, delay=0.005), name="numbers")
        .map_batches(FailOnceAfterACheckpoint(tmp_path, at=N // 3, how="kill"), batch_size=16, name="model",
                     resident=True, resources={"gpu": 0.5})
        .sink_to_file(tmp_path / "out" / "out.txt"))
    client = env.execute_async("device host")
    result = client.wait(180)
    assert (tmp_path / "failed").exists() and result.attempts == 2
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))


# -- the sink's side, in one process ----------------------------------------------------------
def _subtask(sink: SingleFileSink, attempt: int = 0) -> SingleFileSink:
    """``sink`` as subtask 0 of 1 of attempt ``attempt`` gets it, opened."""
    twin: SingleFileSink = pickle.loads(pickle.dumps(sink))
    twin.open(RuntimeContext(task_name="t", operator_name="file sink", index_of_this_subtask=0,
                             number_of_parallel_subtasks=1, attempt_number=attempt, assigned={},
                             taskexecutor_infos={}, taskexecutor_id="te"))
    return twin


def _checkpointed_then_failed(target: Path) -> dict[str, Any]:
    """A run that wrote ``a b``, took checkpoint 1, wrote ``c`` (sealed at a barrier of a
    checkpoint that never completed) and failed; the state of checkpoint 1."""
    sink = SingleFileSink(target)
    sink.open_job()
    first = _subtask(sink)
    first.write(["a", "b"])
    assert first.prepare_commit(1) == []  # nothing is published before the end
    state: dict[str, Any] = first.snapshot_state(1)
    first.write(["c"])
    first.prepare_commit(2)
    first.write(["d"])  # not sealed: removed when the subtask closes
    first.close()
    sink.close_job(False)
    return state


def test_a_restored_subtask_keeps_the_parts_its_checkpoint_names_and_no_later_one(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    state = _checkpointed_then_failed(target)
    assert len(list(tmp_path.glob(".out.txt.sealed-*"))) == 2 and not list(tmp_path.glob(".out.txt.part-*"))
    sink = SingleFileSink(target)
    sink.open_job()  # a job resumed from checkpoint 1: the sealed parts outlive the first run
    second = _subtask(sink, attempt=1)
    second.restore_state(state)
    second.write(["c", "d"])
    second.end_of_input()
    parts = second.prepare_commit(3)
    second.close()
    sink.commit_job([parts])
    sink.close_job(True)
    assert target.read_text() == "a\nb\nc\nd\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # the orphaned sealed part went too


def test_restoring_a_checkpoint_whose_part_is_gone_fails_naming_the_part(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    state = _checkpointed_then_failed(target)
    [named] = state["parts"]
    os.unlink(named.path)
    restored = _subtask(SingleFileSink(target))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(named.path)}: a part file of sink_to_file\("
                                              r".*cannot be read \(No such file or directory\).*restore a "
                                              r"checkpoint taken since, or run the job from the start"):
        restored.restore_state(state)
    restored.close()


def test_restoring_the_checkpoint_of_a_sink_to_another_file_is_refused(tmp_path: Path) -> None:
    state = _checkpointed_then_failed(tmp_path / "theirs.txt")
    restored = _subtask(SingleFileSink(tmp_path / "mine.txt"))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(tmp_path / 'theirs.txt'))}: the restored "
                                              r"checkpoint's sink_to_file wrote this file, but this job's writes"):
        restored.restore_state(state)
    restored.close()


def test_a_standby_that_takes_a_sigkilled_subtasks_place_keeps_what_the_checkpoint_names(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    env = Environment({**gpu_conf, **_conf(tmp_path, 3), "execution.failover.standby-subtasks": 1})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(FailOnceAfterACheckpoint(tmp_path, at=N // 2, how="kill"), batch_size=10, name="model",
                     resources={"gpu": 1})
        .sink_to_file(tmp_path / "out" / "out.txt", name="file"))
    client = env.execute_async("standby")
    result = client.wait(180)
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert failover.path == "in-place" and failover.standby is not None
    assert _lines(tmp_path / "out" / "out.txt") == list(range(N))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["out.txt"]
