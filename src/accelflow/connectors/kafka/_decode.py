"""What a :class:`KafkaSource` emits for one Kafka message: its deserializers, applied.

As in kafka-python and aiokafka, ``value_deserializer`` and ``key_deserializer`` get bytes (or
None); as Flink's ``KafkaRecordDeserializationSchema``, ``deserializer`` gets the whole
:class:`KafkaRecord`.

accelflow 0.1.0 gave ``value_deserializer`` a :class:`KafkaRecord`; such a function keeps
working until the next release. :class:`RecordDecoder` tells it apart at its first call, by one
rule: the function is given the value bytes, and if it raises an ``AttributeError`` for a
:class:`KafkaRecord` field (``key``, ``value``, ``topic``, ``offset``, ``timestamp``...) looked
up on exactly the object it was given, it wants a record. From then on that reader gives it
records, and a ``DeprecationWarning`` (pointing at the function) says what to change.
Signatures and annotations are not consulted (lambdas have none, and ``Any`` says nothing).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from accelflow.connectors.kafka._common import KafkaConnectorError, kafka

TopicPartitionKey = tuple[str, int]
Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One Kafka record, as a ``deserializer`` receives it.

    Attributes:
        timestamp: milliseconds since the epoch, or None when the record has none.
        headers: ``(name, value)`` pairs in the order the producer gave them.
    """

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    headers: tuple[Header, ...] = ()


#: what a function written for a KafkaRecord looks up on what it gets
_RECORD_FIELDS = frozenset(f.name for f in fields(KafkaRecord))


@dataclass(frozen=True, slots=True)
class Deserializers:
    """The user's functions (picklable: they travel with the source)."""

    deserializer: Callable[[KafkaRecord], Any] | None = None
    value_deserializer: Callable[[bytes | None], Any] | None = None
    key_deserializer: Callable[[bytes | None], Any] | None = None

    @property
    def none(self) -> bool:
        return self.deserializer is None and self.value_deserializer is None and self.key_deserializer is None


class RecordDecoder:
    """Turns consumed messages into records for one split reader.

    Emits ``deserializer(record)`` if given; else the value (``value_deserializer(value)`` if
    given, else the bytes), as ``(key_deserializer(key), value)`` when a key_deserializer is
    given. A function that raises fails the job with a :class:`KafkaConnectorError` naming it
    and the record (topic, partition, offset), the original exception chained.
    """

    def __init__(self, functions: Deserializers, bootstrap_servers: str) -> None:
        self._fns = functions
        self._bootstrap = bootstrap_servers
        #: whether value_deserializer wants a KafkaRecord (deprecated): None until its first call
        self._legacy: bool | None = None

    def decode(self, msg: Any, key: TopicPartitionKey, offset: int) -> Any:
        fns = self._fns
        if fns.deserializer is not None:
            return self._call("deserializer", fns.deserializer, _record(msg, key, offset), key, offset)
        value = msg.value()
        if fns.value_deserializer is not None:
            value = self._value(fns.value_deserializer, msg, value, key, offset)
        if fns.key_deserializer is None:
            return value
        return self._call("key_deserializer", fns.key_deserializer, msg.key(), key, offset), value

    def _value(self, fn: Callable[[Any], Any], msg: Any, value: bytes | None, key: TopicPartitionKey,
               offset: int) -> Any:
        if self._legacy:
            return self._call("value_deserializer", fn, _record(msg, key, offset), key, offset)
        if self._legacy is False:
            return self._call("value_deserializer", fn, value, key, offset)
        try:
            out = fn(value)
        except AttributeError as e:
            if e.obj is not value or e.name not in _RECORD_FIELDS:
                raise self._failed("value_deserializer", e, key, offset) from e
            self._legacy = True
            _warn_legacy(fn, e.name)
            return self._value(fn, msg, value, key, offset)
        except Exception as e:
            raise self._failed("value_deserializer", e, key, offset) from e
        self._legacy = False
        return out

    def _call(self, name: str, fn: Callable[[Any], Any], arg: Any, key: TopicPartitionKey, offset: int) -> Any:
        try:
            return fn(arg)
        except Exception as e:
            raise self._failed(name, e, key, offset) from e

    def _failed(self, name: str, e: Exception, key: TopicPartitionKey, offset: int) -> KafkaConnectorError:
        return KafkaConnectorError(
            f"{name} failed on the record at {key[0]}[{key[1]}] offset {offset}: {type(e).__name__}: {e}",
            bootstrap_servers=self._bootstrap, topic=key[0], partition=key[1], offset=offset)


def _record(msg: Any, key: TopicPartitionKey, offset: int) -> KafkaRecord:
    kind, ts = msg.timestamp()
    return KafkaRecord(msg.key(), msg.value(), key[0], key[1], offset,
                       None if kind == kafka().TIMESTAMP_NOT_AVAILABLE else ts, tuple(msg.headers() or ()))


def _warn_legacy(fn: Callable[[Any], Any], attribute: str) -> None:
    """The DeprecationWarning, attributed to ``fn``'s definition (a job script's function is
    in ``__main__``, where Python shows DeprecationWarnings by default)."""
    name = getattr(fn, "__name__", None) or repr(fn)
    message = (
        f"KafkaSource(value_deserializer={name}): {name} reads .{attribute} of its argument, so it "
        f"expects a KafkaRecord; value_deserializer now gets the value bytes (as in kafka-python "
        f"and aiokafka), and a KafkaRecord only until the next release. Pass it as "
        f"deserializer={name} to keep getting the whole KafkaRecord, or make it take the value "
        f"bytes (its argument's .value)."
    )
    code = getattr(fn, "__code__", None)
    if code is None:
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return
    warnings.warn_explicit(message, DeprecationWarning, code.co_filename, code.co_firstlineno,
                           module=getattr(fn, "__module__", None) or "")
