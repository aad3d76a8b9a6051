"""Kafka connector (extra ``accelflow[kafka]``, built on confluent-kafka): a source that
resumes from checkpointed offsets, an at-least-once or exactly-once sink, and an embedded
broker for tests (``accelflow kafka-broker`` in a terminal). See docs/kafka.md.

Importing this package never needs confluent-kafka; using the connector without it raises
:class:`~accelflow.MissingDependencyError` naming ``pip install 'accelflow[kafka]'``.
"""

from accelflow._exports import publish
from accelflow.connectors.kafka._broker import AUTO_CREATED_PARTITIONS, EmbeddedKafkaBroker, MockKafkaCluster
from accelflow.connectors.kafka._common import TIMEOUT_KEY, UNREACHABLE_KEY, KafkaConnectorError
from accelflow.connectors.kafka._decode import KafkaRecord
from accelflow.connectors.kafka._reader import KafkaSplit, PartitionPosition
from accelflow.connectors.kafka._sink import KafkaCommittable, KafkaSink
from accelflow.connectors.kafka._source import KafkaSource

__all__ = [
    "AUTO_CREATED_PARTITIONS",
    "TIMEOUT_KEY",
    "UNREACHABLE_KEY",
    "EmbeddedKafkaBroker",
    "KafkaCommittable",
    "KafkaConnectorError",
    "KafkaRecord",
    "KafkaSink",
    "KafkaSource",
    "KafkaSplit",
    "MockKafkaCluster",
    "PartitionPosition",
]

publish(globals(), __all__)
