"""Helpers to drive the Kafka source and sink contracts directly (no accelflow runtime)."""

from __future__ import annotations

import threading
from typing import Any

import confluent_kafka as ck

from accelflow.connectors.kafka import KafkaSource, KafkaSplit
from accelflow.dataflow import RuntimeContext

__all__ = ["ck", "context", "produce", "read_all", "read_committed"]


def context(index: int = 0, parallelism: int = 1, cancelled: threading.Event | None = None) -> RuntimeContext:
    return RuntimeContext(task_name="kafka-test", index_of_this_subtask=index,
                          number_of_parallel_subtasks=parallelism, attempt_number=0, assigned={},
                          taskexecutor_infos={}, taskexecutor_id="taskexecutor-test", cancelled=cancelled)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for v in values:
        if partition is None:
            producer.produce(topic, v)
        else:
            producer.produce(topic, v, partition=partition)
    assert producer.flush(10) == 0


def read_all(source: KafkaSource, split: KafkaSplit) -> list[Any]:
    """Every record of a bounded split."""
    return [r for chunk in source.read_chunks(split, context()) for r in chunk]


def read_committed(bootstrap: str, topic: str, partitions: int = 4) -> list[bytes]:
    """Every record a read_committed reader sees in ``topic`` now."""
    source = KafkaSource(bootstrap, topic, group_id="checker", bounded=True)
    return [r for split in source.create_splits(1) for r in read_all(source, split)]
