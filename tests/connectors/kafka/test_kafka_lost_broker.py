"""A Kafka broker that dies under a running job (issue 25, item 21): the job fails within
``accelflow.unreachable.timeout.ms`` with an error naming the broker and the topic, its
checkpoints keep completing meanwhile (an offset commit never waits for the gone broker), and
librdkafka's log stays a few lines. Real processes: ``accelflow kafka-broker`` and
``accelflow run``."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from accelflow.connectors.kafka import KafkaConnectorError, KafkaSink
from kafka_cli import ACCELFLOW, kafka_broker
from kafka_helpers import context, produce

JOB = textwrap.dedent("""
    import os, signal, sys, time
    from accelflow import Environment
    from accelflow.connectors.files import FileSink
    from accelflow.connectors.kafka import KafkaSource

    bootstrap, broker_pid, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    env = Environment({"execution.checkpointing.interval": "100 ms", "restart-strategy": "none"})
    source = KafkaSource(bootstrap, "events", group_id="lost-broker", properties={
        "accelflow.timeout.ms": 2000, "accelflow.unreachable.timeout.ms": 5000})
    env.from_source(source, name="events").map(bytes.decode).sink_to(FileSink(out), name="files")
    client = env.execute_async("lost broker")

    def completed():
        jobs = list(client.jobmanager.jobs.values())
        return jobs[0].checkpoints.completed if jobs else 0

    while completed() < 3:  # offsets were committed a few times: the group's coordinator is known
        time.sleep(0.01)
    os.kill(broker_pid, signal.SIGKILL)
    killed_at, after = completed(), 0
    while client.status() not in ("FAILED", "FINISHED", "CANCELED"):
        after = completed() - killed_at
        time.sleep(0.01)
    print(f"checkpoints after the kill: {after}", flush=True)
    client.wait(1)  # raises the job's error: accelflow run prints it and exits 1
""")


@pytest.mark.slow
def test_a_lost_broker_fails_the_job_within_the_bound_quietly(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    with kafka_broker("--topic", "events:2") as (broker, bootstrap):
        produce(bootstrap, "events", [b"%d" % i for i in range(100)])
        proc = subprocess.run([ACCELFLOW, "run", "--no-progress", "job.py", bootstrap, str(broker.pid),
                               str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert re.search(rf"no Kafka broker of {re.escape(bootstrap)} reachable for \d+ s while reading events\[",
                     proc.stderr), proc.stderr[-3000:]
    assert "accelflow.unreachable.timeout.ms" in proc.stderr
    # 100 ms apart for the 5 s the source waits: without asynchronous commits the first one
    # after the kill held the source for 45 s (librdkafka's session.timeout.ms) and no other came
    after = int(re.search(r"checkpoints after the kill: (\d+)", proc.stdout).group(1))  # type: ignore[union-attr]
    assert after >= 3, proc.stdout
    librdkafka = [line for line in proc.stderr.splitlines() if "rdkafka" in line]
    assert len(librdkafka) <= 12, "\n".join(librdkafka[:40])  # ~20 a second per client before


@pytest.mark.timeout(60)
def test_a_full_producer_queue_fails_the_sink_after_the_timeout() -> None:
    sink = KafkaSink("127.0.0.1:1", "t", delivery_guarantee="none",
                     properties={"queue.buffering.max.messages": 1, "accelflow.timeout.ms": 500})
    sink.open(context())
    with pytest.raises(KafkaConnectorError, match=r"topic 't': the producer's local queue stayed full for 0\.5 s"):
        sink.write(["a", "b"])
    sink.close()
