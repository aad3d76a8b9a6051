"""Issue 28's "Done when" with the embedded Kafka broker as the source: a checkpointed Kafka ->
``map_batches`` on fake GPUs -> exactly-once ``FileSink`` job whose GPU subtask is SIGKILLed
mid-stream rolls back in place (only the killed subtask's process is replaced; the Kafka
source subtasks, survivors, rewind their partitions' offsets to the checkpoint inside their
processes), or hands the killed subtask's index to a standby; every record of the topic is
in the output once (real processes, fake GPUs)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
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


def _run(conf: dict[str, Any], tmp_path: Path, parallelism: int, **extra: Any) -> tuple[Any, Any]:
    """Kafka (``PARTITIONS`` partitions, read slowly) -> a ``Model`` on ``{"gpu": 1}`` ->
    ``FileSink``; once a checkpoint published output, subtask 2 of the model (``(2/n)``) is
    SIGKILLed, while the sources still read. The job's result and its record, to its end."""
    with EmbeddedKafkaBroker() as broker:
        broker.create_topic("images", partitions=PARTITIONS)
        _produce(broker.bootstrap_servers, "images")
        env = Environment({**conf, "parallelism.default": parallelism, "execution.checkpointing.interval": "100 ms",
                           "restart-strategy.fixed-delay.delay": "0 s", **extra})
        source = KafkaSource(broker.bootstrap_servers, "images", group_id="in-place", bounded=True,
                             value_deserializer=Paced(0.002))
        (env.from_source(source, name="kafka")
            .map_batches(Model(tmp_path), batch_size=10, name="model", resources={"gpu": 1})
            .sink_to(FileSink(tmp_path / "out"), name="files"))
        client = env.execute_async("kafka in place")
        _kill_mid_stream(client, tmp_path)
        result = client.wait(120)
    return result, client.jobmanager.jobs[result.job_id]


def _kill_mid_stream(client: Any, tmp_path: Path) -> None:
    """SIGKILL model subtask 2 once a checkpoint completed and published some output (the
    rollback goes back to it, not to the start) and it processed a batch; ``<tmp>/killed`` says
    when."""
    deadline = time.monotonic() + 60
    while True:
        job = next(iter(client.jobmanager.jobs.values()), None)
        victim = next((pid for pid, index, _ in opens(tmp_path) if index == 1), None)
        if job is not None and job.checkpoints.completed >= 1 and any((tmp_path / "out").glob("part-*")) \
                and any(pid == victim for _, pid, _, _ in calls(tmp_path)):
            break
        assert client.status() not in ("FINISHED", "FAILED"), "the job ended before the kill"
        assert time.monotonic() < deadline, "no checkpoint completed"
        time.sleep(0.01)
    assert victim is not None
    (tmp_path / "killed").write_text(f"{time.time():.6f}")
    os.kill(victim, signal.SIGKILL)


def _exactly_once_and_replayed(tmp_path: Path) -> None:
    """Every record of the topic published once; the map met records both before and after the
    kill (the sources, all survivors, read them again from the checkpoint's offsets) and some
    only after it (the sources still had their partitions to read)."""
    assert published(tmp_path / "out") == list(range(N))  # 0 duplicates, 0 lost
    killed_at = float((tmp_path / "killed").read_text())
    before = {r for t, _, _, records in calls(tmp_path) if t < killed_at for r in records}
    after = {r for t, _, _, records in calls(tmp_path) if t > killed_at for r in records}
    assert before & after and after - before


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
