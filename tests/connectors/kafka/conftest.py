"""One embedded Kafka broker per test module (helpers live in ``kafka_helpers``)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

if str(Path(__file__).parent) not in sys.path:  # kafka_helpers
    sys.path.insert(0, str(Path(__file__).parent))

from accelflow.connectors.kafka import EmbeddedKafkaBroker  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedKafkaBroker]:
    with EmbeddedKafkaBroker() as b:
        yield b


@pytest.fixture
def topic(broker: EmbeddedKafkaBroker, request: pytest.FixtureRequest) -> str:
    """A fresh 4-partition topic named after the test."""
    name = f"{request.node.name.replace('[', '-').replace(']', '')}-{next(_names)}"
    broker.create_topic(name, partitions=4)
    return name
