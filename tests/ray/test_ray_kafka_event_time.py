"""Per-partition watermarks of a Kafka source (issue 30) where Ray runs the TaskExecutors: the
same job and checks as on the local cluster (tests/connectors/kafka/test_kafka_event_time.py),
one source subtask reading a lagging partition and one 30 s ahead, no record late."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

KAFKA_TESTS = Path(__file__).parents[1] / "connectors" / "kafka"
if str(KAFKA_TESTS) not in sys.path:
    sys.path.insert(0, str(KAFKA_TESTS))

from test_kafka_event_time import lagging_partition_stays_on_time  # noqa: E402

from accelflow.connectors.kafka import EmbeddedKafkaBroker  # noqa: E402

pytestmark = pytest.mark.slow


def test_per_partition_watermarks_keep_a_lagging_partition_on_time_on_ray(ray_conf: dict[str, Any]) -> None:
    with EmbeddedKafkaBroker() as broker:
        lagging_partition_stays_on_time(broker, ray_conf)
