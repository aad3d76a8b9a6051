"""The embedded broker: a child process that serves Kafka over TCP, creates topics, and goes
away with its parent; and the connector's import needs confluent-kafka only when used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelflow._errors import MissingDependencyError
from accelflow.connectors.kafka import AUTO_CREATED_PARTITIONS, EmbeddedKafkaBroker, KafkaConnectorError, KafkaSource
from kafka_helpers import ck, produce


def _partitions(bootstrap: str, topic: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "metadata"})
    try:
        return len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    finally:
        consumer.close()


def test_create_topic_and_auto_created_topics(broker: EmbeddedKafkaBroker) -> None:
    broker.create_topic("six-partitions", partitions=6)
    assert _partitions(broker.bootstrap_servers, "six-partitions") == 6
    produce(broker.bootstrap_servers, "made-on-first-use", [b"x"])
    assert _partitions(broker.bootstrap_servers, "made-on-first-use") == AUTO_CREATED_PARTITIONS == 4
    with pytest.raises(KafkaConnectorError, match="cannot create topic 'six-partitions': .*already exists"):
        broker.create_topic("six-partitions")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().count("State:\tZ") == 1
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_holder_dies_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import os, sys
        from accelflow.connectors.kafka import EmbeddedKafkaBroker
        broker = EmbeddedKafkaBroker().__enter__()
        print(broker.pid, flush=True)
        os._exit(0)  # no __exit__: the holder must notice on its own
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    waited = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import time, pathlib
        def gone():
            try:
                return "State:\\tZ" in pathlib.Path("/proc/{pid}/status").read_text()
            except FileNotFoundError:
                return True
        while not gone():
            time.sleep(0.05)
    """)], timeout=60)
    assert waited.returncode == 0 and _gone(pid)


def test_closing_stops_the_holder() -> None:
    with EmbeddedKafkaBroker() as broker:
        pid = broker.pid
    assert _gone(pid)
    with pytest.raises(RuntimeError, match="not started"):
        broker.bootstrap_servers


def test_import_never_needs_confluent_kafka() -> None:
    code = "import sys, accelflow, accelflow.connectors.kafka, accelflow.testing; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def test_missing_confluent_kafka_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails as if not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'accelflow\[kafka\]'"):
        KafkaSource("b:9092", "t", group_id="g").create_splits(1)
    with pytest.raises(MissingDependencyError):
        EmbeddedKafkaBroker().__enter__()
