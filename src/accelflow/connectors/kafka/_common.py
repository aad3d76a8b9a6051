"""What the Kafka source, sink and test broker share: the lazy ``confluent_kafka`` import,
the connector's error, and the checks on user-given librdkafka properties."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelflow._errors import AccelflowError, ConfigError, MissingDependencyError
from accelflow.connectors.kafka._log import with_logger

#: accelflow's own property (never passed to librdkafka): how long one blocking call to the
#: brokers (metadata, watermarks, committed offsets, flush, a transaction step, an offset
#: commit waiting for its coordinator, closing a consumer) may take
TIMEOUT_KEY = "accelflow.timeout.ms"
DEFAULT_TIMEOUT_MS = 30_000
#: accelflow's own KafkaSource property: how long no broker may be reachable before the source
#: fails (0: never). 60 s, as the Java client's ``default.api.timeout.ms``: longer than a
#: broker's restart or a leader election, short enough for the restart strategy to act soon.
UNREACHABLE_KEY = "accelflow.unreachable.timeout.ms"
DEFAULT_UNREACHABLE_MS = 60_000


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
    properties: Mapping[str, object] | None, *, reserved: Mapping[str, str], own: Mapping[str, int]
) -> tuple[dict[str, Any], dict[str, float]]:
    """``properties`` as librdkafka settings, and accelflow's own ones (in seconds).

    Args:
        properties: the user's settings, e.g. ``{"security.protocol": "SSL"}``.
        reserved: keys the connector sets itself -> why (refused with a :class:`ConfigError`).
        own: the ``accelflow.*`` keys this client takes -> default in milliseconds; any other
            ``accelflow.*`` key is refused.

    Example:
        >>> split_properties({"linger.ms": 5, "accelflow.timeout.ms": "1500"}, reserved={},
        ...                  own={TIMEOUT_KEY: DEFAULT_TIMEOUT_MS})
        ({'linger.ms': 5}, {'accelflow.timeout.ms': 1.5})
    """
    props = dict(properties or {})
    bad = [k for k in props if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"property names must be strings, got {bad[0]!r}", key="properties")
    for key, why in reserved.items():
        if key in props:
            raise ConfigError(f"set by the connector ({why}); remove it", key=f"properties[{key!r}]")
    for key in props:
        if key.startswith("accelflow.") and key not in own:
            raise ConfigError(f"not a property of this connector; it takes {', '.join(own)}",
                              key=f"properties[{key!r}]")
    return props, {key: _milliseconds(key, props.pop(key, default)) / 1000.0 for key, default in own.items()}


def _milliseconds(key: str, raw: object) -> int:
    zero_ok = key == UNREACHABLE_KEY
    if (isinstance(raw, bool) or not isinstance(raw, int | str) or not str(raw).isdigit()
            or (int(raw) == 0 and not zero_ok)):
        what = "a positive integer" if not zero_ok else "an integer >= 0 (0: never)"
        raise ConfigError(f"expected {what} (milliseconds), got {raw!r}", key=f"properties[{key!r}]")
    return int(raw)


def consumer_conf(conf: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """``conf`` for a consumer of the connector: librdkafka's log rate-limited and, unless the
    user set it, ``session.timeout.ms`` = the call timeout. The connector's consumers never join
    a group (``assign``), so the session timeout only bounds how long an offset commit waits
    for the group's coordinator, and how long closing a consumer waits for such a commit in
    flight (librdkafka's default, 45 s, is what a checkpoint waited once a broker was gone)."""
    return with_logger({"session.timeout.ms": max(1, int(timeout_s * 1000)), **conf})
