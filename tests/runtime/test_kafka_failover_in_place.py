"""Issue 28's "Done when" with the embedded Kafka broker as the source: a checkpointed Kafka ->
``map_batches`` on fake GPUs -> exactly-once ``FileSink`` job meets each failure case of
``docs/failover.md`` while its Kafka source subtasks still read their partitions:

- a SIGKILLed GPU subtask is replaced alone (the Kafka source subtasks, survivors, rewind their
  partitions' offsets to the checkpoint inside their processes), or a standby takes its index;
- a raising subtask, its survivors' partial ``map_batches`` batches dropped;
- a hung subtask (``heartbeat.timeout``), found, killed and replaced;
- two failures in a row, rolled back twice;
- a failed standby, replaced without a restart;
- keyed state (Kafka -> ``key_by`` -> ``reduce``) rolled back in the survivors;
- a SIGKILLed TaskExecutor whose GPU subtasks fit nowhere: the full restart path;
- a failure during a rollback: a full restart.

Each checks that every record of the topic is in the output once and how many ``open()`` calls
happened (real processes, fake GPUs)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Model, calls, opens, published
from kafka_failover_jobs import Paced

from accelflow import Environment
from accelflow.connectors.files import FileSink

ck = pytest.importorskip("confluent_kafka")

from accelflow.connectors.kafka import EmbeddedKafkaBroker, KafkaSource  # noqa: E402

pytestmark = pytest.mark.slow
N = 4000
PARTITIONS = 4
Provoke = Callable[[Any, Path], None]
FAST = {"heartbeat.timeout": "1 s", "heartbeat.interval": "100 ms"}  # as test_hung_subtasks.py


def _produce(bootstrap: str, topic: str) -> None:
    """``0..N-1``, record ``i`` in partition ``i % PARTITIONS``, in record batches of 10: the
    embedded broker hands a consumer a few batches per fetch, so a source's chunks are small and
    each checkpoint's offsets fall inside the partitions."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10})
    for i in range(N):
        producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(30) == 0


def _checkpointed(client: Any, tmp_path: Path, ready: Callable[[], bool]) -> Any:
    """The job, once a checkpoint completed and published some output (a rollback goes back to
    it, not to the start), the map processed a batch since the latest completed checkpoint (it
    will be replayed) and ``ready()``; the sources still read."""
    deadline = time.monotonic() + 60
    completed, seen_at = 0, time.time()
    while True:
        job = next(iter(client.jobmanager.jobs.values()), None)
        if job is not None and job.checkpoints.completed != completed:
            completed, seen_at = job.checkpoints.completed, time.time()  # batches before it: not replayed
        elif completed >= 1 and any((tmp_path / "out").glob("part-*")) and ready() \
                and any(t > seen_at for t, *_ in calls(tmp_path)):
            return job
        assert client.status() not in ("FINISHED", "FAILED"), "the job ended before the failure"
        assert time.monotonic() < deadline, "no checkpoint completed"
        time.sleep(0.01)


def _kill_mid_stream(client: Any, tmp_path: Path) -> None:
    """SIGKILL model subtask 2 once a checkpoint published output and it processed a batch;
    ``<tmp>/killed`` says when."""
    def victim() -> int | None:
        return next((pid for pid, index, _ in opens(tmp_path) if index == 1), None)

    _checkpointed(client, tmp_path, lambda: any(pid == victim() for _, pid, _, _ in calls(tmp_path)))
    pid = victim()
    assert pid is not None
    (tmp_path / "killed").write_text(f"{time.time():.6f}")
    os.kill(pid, signal.SIGKILL)


def _kill_taskexecutor_2(client: Any, tmp_path: Path) -> None:
    """SIGKILL ``taskexecutor-2`` (2 GPU subtasks, their GPUs) once the 4 models are open and a
    checkpoint published output; ``<tmp>/killed`` says when."""
    _checkpointed(client, tmp_path, lambda: len(opens(tmp_path)) == 4 and bool(calls(tmp_path)))
    (tmp_path / "killed").write_text(f"{time.time():.6f}")
    os.kill(client.jobmanager.taskexecutors["taskexecutor-2"].registration.pid, signal.SIGKILL)


def _run(conf: dict[str, Any], tmp_path: Path, parallelism: int, model: Model | None = None,
         provoke: Provoke | None = _kill_mid_stream, batch_size: int = 10, keyed: bool = False,
         **extra: Any) -> tuple[Any, Any]:
    """Kafka (``PARTITIONS`` partitions, read slowly) -> ``model`` (a plain ``Model`` by
    default) on ``{"gpu": 1}`` -> (with ``keyed``: sums of each 50 records, ``key_by`` ->
    ``reduce``) -> ``FileSink``. ``provoke(client, tmp_path)`` makes the failure (by default
    SIGKILLs model subtask 2 mid-stream) and creates ``<tmp>/killed``, which the sources wait
    for in the middle of each partition; ``None`` when ``model`` fails itself (at a record).
    The job's result and its record, to its end."""
    with EmbeddedKafkaBroker() as broker:
        broker.create_topic("images", partitions=PARTITIONS)
        _produce(broker.bootstrap_servers, "images")
        env = Environment({**conf, "parallelism.default": parallelism, "execution.checkpointing.interval": "100 ms",
                           "restart-strategy.fixed-delay.delay": "0 s", **extra})
        # a failure from outside comes before the sources read the second half of each partition
        gate = None if provoke is None else tmp_path / "killed"
        source = KafkaSource(broker.bootstrap_servers, "images", group_id="in-place", bounded=True,
                             value_deserializer=Paced(0.002, gate, gate_at=N // 2))
        stream = env.from_source(source, name="kafka").map_batches(
            model or Model(tmp_path), batch_size=batch_size, name="model", resources={"gpu": 1})
        if keyed:  # new keys keep coming: a survivor's sums not rolled back would count records twice
            stream = stream.key_by(lambda x: int(x) // 50).reduce(lambda a, b: a + b, name="sums")
        stream.sink_to(FileSink(tmp_path / "out"), name="files")
        client = env.execute_async("kafka in place")
        if provoke is not None:
            provoke(client, tmp_path)
        result = client.wait(120)
    return result, client.jobmanager.jobs[result.job_id]


def _exactly_once_and_replayed(tmp_path: Path, expected: list[int] | None = None) -> None:
    """Every record of the topic published once (or ``expected``, e.g. sums); the map met some
    records only after the failure (the sources still had their partitions to read), and, for
    a failure from outside (``<tmp>/killed``, after a batch the checkpoint did not cover), some
    both before and after it (the sources, all survivors, read them again from the
    checkpoint's offsets). A failure at a record (``Model``'s ``failure.log``) may come before
    any checkpoint completed: the rollback then goes back to the start."""
    assert published(tmp_path / "out") == (list(range(N)) if expected is None else expected)  # 0 duplicates, 0 lost
    killed = tmp_path / "killed"
    failed_at = float((killed if killed.exists() else tmp_path / "failure.log").read_text().split()[0])
    before = {r for t, _, _, records in calls(tmp_path) if t < failed_at for r in records}
    after = {r for t, _, _, records in calls(tmp_path) if t > failed_at for r in records}
    assert after - before and (before & after or not killed.exists())


def _opened(tmp_path: Path) -> list[tuple[int, int, int]]:
    """Every ``open()`` so far, checked to be the first of its process."""
    seen = opens(tmp_path)
    assert max(Counter(pid for pid, _, _ in seen).values()) == 1, seen
    return seen


def test_a_sigkilled_gpu_subtask_reading_kafka_is_replaced_and_the_others_roll_back_in_place(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    result, job = _run(gpu_conf, tmp_path, parallelism=4)
    _exactly_once_and_replayed(tmp_path)
    assert result.attempts == 2
    [failover] = job.failovers
    assert failover.path == "in-place" and job.restore_id >= 1  # from a checkpoint, not the start
    assert failover.replaced == ["model -> files (2/4)"]
    # 4 Kafka source subtasks and 3 GPU subtasks rolled back in their processes
    assert len(failover.rolled_back) == 7 and sum(name.startswith("kafka (") for name in failover.rolled_back) == 4
    # 4 open() calls, then the replacement's only, with the killed subtask's index
    seen = _opened(tmp_path)
    assert len(seen) == 5 and seen[-1][1] == 1


def test_a_standby_takes_over_from_a_sigkilled_gpu_subtask_reading_kafka(gpu_conf: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    result, job = _run(gpu_conf, tmp_path, parallelism=3, **{"execution.failover.standby-subtasks": 1})
    _exactly_once_and_replayed(tmp_path)
    assert result.attempts == 2
    [failover] = job.failovers
    assert failover.path == "in-place" and job.restore_id >= 1
    assert failover.standby == "model -> files (standby 1 of 1)" and failover.replaced == ["model -> files (2/3)"]
    assert len(failover.rolled_back) == 5  # 3 Kafka source subtasks, 2 GPU subtasks
    # 3 subtasks and the standby opened before the kill; after it, no replacement: only the next
    # standby (index -1, on the killed subtask's GPU once it is free), while the sources read on
    seen = _opened(tmp_path)
    assert len(seen) == 5 and sorted(index for _, index, _ in seen[:4]) == [-1, 0, 1, 2] and seen[4][1] == -1
    standby_pid = next(pid for pid, index, _ in seen[:4] if index == -1)
    assert {index for _, pid, index, _ in calls(tmp_path) if pid == standby_pid} == {1}  # it worked as 2/3
    assert job.standby_missing == {}


def _rolled_back_in_place(result: Any, job: Any, tmp_path: Path, *, attempts: int = 2) -> None:
    """Each failure rolled back in place; 4 ``open()`` calls, then one per replacement only."""
    assert result.attempts == attempts and [f.path for f in job.failovers] == ["in-place"] * (attempts - 1)
    assert len(_opened(tmp_path)) == 4 + attempts - 1


def test_a_raising_gpu_subtask_reading_kafka_is_replaced_and_partial_batches_are_dropped(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # record 1200 is in partition 0, a third into it; batches of 25 from the sources' small
    # chunks: the survivors hold partial batches when the failure comes
    model = Model(tmp_path, fail="raise", at=1200)
    result, job = _run(gpu_conf, tmp_path, 4, model, provoke=None, batch_size=25)
    _exactly_once_and_replayed(tmp_path)
    _rolled_back_in_place(result, job, tmp_path)


def test_a_hung_gpu_subtask_reading_kafka_is_found_and_replaced(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    model = Model(tmp_path, fail="hang", at=1200)
    result, job = _run(gpu_conf, tmp_path, 4, model, provoke=None, **FAST)
    _exactly_once_and_replayed(tmp_path)
    _rolled_back_in_place(result, job, tmp_path)
    assert "is hung" in job.failovers[0].cause


def test_a_slow_value_deserializer_over_a_whole_poll_is_not_hung(tmp_path: Path) -> None:
    # 2 ms a record, polls of up to 1024 records: a poll takes more than the 1 s timeout, each
    # call of the deserializer far less (as a map over a chunk, test_hung_subtasks.py)
    with EmbeddedKafkaBroker() as broker:
        broker.create_topic("images", partitions=PARTITIONS)
        _produce(broker.bootstrap_servers, "images")
        env = Environment({"parallelism.default": PARTITIONS, "restart-strategy": "none", **FAST})
        source = KafkaSource(broker.bootstrap_servers, "images", group_id="slow", bounded=True,
                             value_deserializer=Paced(0.002))
        assert sorted(env.from_source(source, name="kafka").execute_and_collect()) == list(range(N))


def test_two_failures_in_a_row_reading_kafka_roll_back_twice(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # both records are in partition 0 (1200 a third into it, 2400 later): the subtask reading it
    # fails, and its replacement fails again after the first rollback
    model = Model(tmp_path, fail="raise", at=1200, at2=2400)
    result, job = _run(gpu_conf, tmp_path, 4, model, provoke=None)
    _exactly_once_and_replayed(tmp_path)
    _rolled_back_in_place(result, job, tmp_path, attempts=3)


def test_a_failed_standby_reading_kafka_is_replaced_without_a_restart(gpu_conf: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    # the standby's open() raises; the kill at record 1200 waits for its replacement to be open
    # (3 + 1 + 1 opens), then the new standby takes the killed subtask's index
    model = Model(tmp_path, fail="kill", at=1200, fail_open="standby", opens_first=5)
    result, job = _run(gpu_conf, tmp_path, 3, model, provoke=None, **{"execution.failover.standby-subtasks": 1})
    _exactly_once_and_replayed(tmp_path)
    assert result.attempts == 2 and len(job.failovers) == 1  # the standby's failure restarted nothing
    assert job.failovers[0].path == "in-place" and job.failovers[0].standby is not None
    assert len(_opened(tmp_path)) == 3 + 1 + 1 + 1  # the failed standby, its replacement, the next one


def test_keyed_state_downstream_of_kafka_is_rolled_back(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    model = Model(tmp_path, fail="raise", at=1200)
    result, job = _run(gpu_conf, tmp_path, 4, model, provoke=None, keyed=True,
                       **{"execution.runtime-mode": "batch"})
    _exactly_once_and_replayed(tmp_path, expected=sorted(sum(range(k, k + 50)) for k in range(0, N, 50)))
    _rolled_back_in_place(result, job, tmp_path)


def test_a_sigkilled_taskexecutor_whose_gpu_subtasks_fit_nowhere_restarts_the_kafka_job(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    result, job = _run(gpu_conf, tmp_path, 4, provoke=_kill_taskexecutor_2)
    _exactly_once_and_replayed(tmp_path)
    [failover] = job.failovers
    assert failover.path == "full" and failover.why_full is not None and job.restore_id >= 1
    # each GPU of taskexecutor-1 is held by a survivor: the 2 lost GPU subtasks fit nowhere
    assert failover.why_full.startswith("no TaskExecutor has room for ")
    assert sorted(failover.failed) == ["kafka (3/4)", "kafka (4/4)", "model -> files (3/4)", "model -> files (4/4)"]
    assert len(_opened(tmp_path)) == 4 + 4  # the full restart opens every subtask again


def test_a_failure_during_a_rollback_of_a_kafka_job_falls_back_to_a_full_restart(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # the replacement (attempt 1) fails in open(): every subtask restarts (attempt 2)
    model = Model(tmp_path, fail="kill", at=1200, fail_open=1)
    result, job = _run(gpu_conf, tmp_path, 4, model, provoke=None)
    _exactly_once_and_replayed(tmp_path)
    assert result.attempts == 3 and [f.path for f in job.failovers] == ["in-place", "full"]
    assert job.failovers[1].why_full == "it failed while the job was still rolling back"
    assert len(_opened(tmp_path)) == 4 + 1 + 4
