"""What the Kafka source, sink and test broker share: the lazy ``confluent_kafka`` import,
the connector's error, and the checks on user-given librdkafka properties."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelflow._errors import AccelflowError, ConfigError, MissingDependencyError

#: accelflow's own property (never passed to librdkafka): how long one blocking call to the
#: brokers (metadata, watermarks, committed offsets, flush, a transaction step) may take
TIMEOUT_KEY = "accelflow.timeout.ms"
DEFAULT_TIMEOUT_MS = 30_000


class KafkaConnectorError(AccelflowError):
    """The Kafka connector could not do its job: a broker is unreachable, a message carried an
    error, a (de)serializer raised, a delivery or a transaction failed.

    Attributes:
        bootstrap_servers: the brokers asked.
        topic: the topic concerned, when one is.
        partition: the partition concerned, when one is.
        offset: the offset of the record concerned, when one is.
    """

    def __init__(
        self,
        message: str,
        *,
        bootstrap_servers: str,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(message)


def kafka() -> Any:
    """The ``confluent_kafka`` module, imported on first use (``import accelflow`` never
    needs it); a :class:`MissingDependencyError` naming the extra when it is not installed."""
    try:
        import confluent_kafka
    except ImportError as e:
        raise MissingDependencyError("the Kafka connector (confluent-kafka)", extra="kafka") from e
    return confluent_kafka


def check_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"expected a non-empty string, got {value!r}", key=name)
    return value


def split_properties(
    properties: Mapping[str, object] | None, *, reserved: Mapping[str, str]
) -> tuple[dict[str, Any], float]:
    """``properties`` as librdkafka settings, and the timeout (seconds) from
    :data:`TIMEOUT_KEY`.

    Args:
        properties: the user's settings, e.g. ``{"security.protocol": "SSL"}``.
        reserved: keys the connector sets itself -> why (refused with a :class:`ConfigError`).
    """
    props = dict(properties or {})
    bad = [k for k in props if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"property names must be strings, got {bad[0]!r}", key="properties")
    for key, why in reserved.items():
        if key in props:
            raise ConfigError(f"set by the connector ({why}); remove it", key=f"properties[{key!r}]")
    raw = props.pop(TIMEOUT_KEY, DEFAULT_TIMEOUT_MS)
    if isinstance(raw, bool) or not isinstance(raw, int | str) or not str(raw).isdigit() or int(raw) <= 0:
        raise ConfigError(f"expected a positive integer (milliseconds), got {raw!r}",
                          key=f"properties[{TIMEOUT_KEY!r}]")
    return props, int(raw) / 1000.0
