"""Issue 13's proof: a checkpointed Kafka -> GPU map -> FileSink job survives a SIGKILLed
TaskExecutor with every record exactly once in the output (real processes, the embedded
Kafka broker, fake GPUs)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_jobs import OnItsGpu

from accelflow import Environment

ck = pytest.importorskip("confluent_kafka")

from accelflow.connectors.files import FileSink  # noqa: E402
from accelflow.connectors.kafka import EmbeddedKafkaBroker, KafkaSource  # noqa: E402

pytestmark = pytest.mark.slow
N = 20_000


def _slowly(value: bytes) -> int:
    time.sleep(0.0005)
    return int(value)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, str(i).encode())
        if i % 5000 == 4999:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_kafka_to_gpu_map_to_file_sink_survives_a_killed_taskexecutor_exactly_once(
        gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "predictions"
    with EmbeddedKafkaBroker() as broker:
        broker.create_topic("images", partitions=4)
        _produce(broker.bootstrap_servers, "images", N)
        env = Environment({
            **gpu_conf, "parallelism.default": 2,
            "execution.checkpointing.interval": "100 ms",
            "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
            "restart-strategy.fixed-delay.delay": "0 s",
        })
        # a slow source keeps reading (and taking part in checkpoints) while the test kills
        # a TaskExecutor: a bounded source that has read everything stops checkpoints until
        # the job's final one
        source = KafkaSource(broker.bootstrap_servers, "images", group_id="exactly-once-test",
                             bounded=True, value_deserializer=_slowly)
        (env.from_source(source, name="kafka")
            .map(OnItsGpu(), name="classify", resources={"gpu": 1})
            .sink_to(FileSink(str(out)), name="files"))
        client = env.execute_async("kafka exactly once")
        deadline = time.monotonic() + 120
        while True:  # a TaskExecutor dies once a checkpoint has published some output
            jobs = list(client.jobmanager.jobs.values())
            gpu_host = next((st.taskexecutor for st in list(client.jobmanager.subtasks.values())
                             if st.name.startswith("classify") and st.state == "RUNNING"), None)
            if jobs and jobs[0].checkpoints.completed >= 2 and any(out.glob("part-*")) and gpu_host:
                break
            assert client.status() not in ("FINISHED", "FAILED"), (
                f"the job ended before the kill: {jobs[0].checkpoints if jobs else None}")
            assert time.monotonic() < deadline, "no checkpoint completed"
            time.sleep(0.01)
        published_before = len(list(out.glob("part-*")))
        os.kill(client.jobmanager.taskexecutors[gpu_host].registration.pid, signal.SIGKILL)
        result = client.wait(180)
    assert result.attempts == 2
    assert published_before > 0
    lines = [int(line) for part in sorted(out.glob("part-*"))
             for line in part.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == N, f"{len(lines) - N:+d} records"
    assert sorted(lines) == list(range(N))
