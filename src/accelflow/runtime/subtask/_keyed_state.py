"""The keyed state backend of one operator (Flink's heap backend): Value, List, Map, Reducing
and Aggregating state with PyFlink's methods, scoped to the current key and namespace (a
window, or ``None``), with time-to-live against an injectable clock, and snapshots per key
group so that state follows its keys on rescale.

Example:
    >>> from accelflow.dataflow.eventtime import ValueStateDescriptor
    >>> backend = KeyedStateBackend("counts")
    >>> count = backend.get_state(ValueStateDescriptor("count"))
    >>> backend.set_current_key("a"); count.update(3)
    >>> backend.set_current_key("b"); count.value() is None
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import StateDescriptor
from accelflow.runtime.subtask._keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange, key_group_of
from accelflow.runtime.subtask._keys import canonical_key
from accelflow.runtime.subtask._state_ttl import Ttl, drop_expired

_MISSING = object()
#: a state's stored entries: (key, namespace) -> value (a list for list state, a dict for map
#: state; TTL'd values are ``Stamped``)
Table = dict[tuple[Any, Any], Any]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class KvState:
    """A state object: every call acts on the backend's current key and this object's
    current namespace (``set_current_namespace``)."""

    kind = ""

    def __init__(self, backend: KeyedStateBackend, descriptor: StateDescriptor) -> None:
        self.backend = backend
        self.descriptor = descriptor
        self.table: Table = backend.tables.setdefault(descriptor.name, {})
        config = descriptor.ttl_config
        self.ttl = Ttl(config, backend.clock) if config is not None and config.is_enabled() else None
        self.namespace: Any = None
        self._sweep: Iterator[tuple[Any, Any]] = iter(())

    def set_current_namespace(self, namespace: Any) -> None:
        self.namespace = namespace

    def _slot(self) -> tuple[Any, Any]:
        self.cleanup_incrementally()
        return self.backend.current_key, self.namespace

    def clear(self) -> None:
        self.table.pop(self._slot(), None)

    def _wrap(self, value: Any) -> Any:
        return self.ttl.stamp(value) if self.ttl is not None else value

    def _read(self, container: dict[Any, Any], key: Any) -> tuple[bool, Any]:
        """``(found, value)`` of ``container[key]``, applying TTL (expired: removed, and seen
        only with ``ReturnExpiredIfNotCleanedUp``)."""
        stored = container.get(key, _MISSING)
        if stored is _MISSING:
            return False, None
        if self.ttl is None:
            return True, stored
        visible, keep, restamped = self.ttl.read(stored)
        if keep:
            container[key] = restamped
        else:
            del container[key]
        return (True, stored.value) if visible else (False, None)

    def cleanup_incrementally(self) -> None:
        """Checks the next few entries for expiry (``cleanup_incrementally(size, ...)``)."""
        size = self.ttl.config.incremental_cleanup_size if self.ttl is not None else None
        if not size or self.ttl is None:
            return
        now = self.ttl.clock()
        for _ in range(size):
            slot = next(self._sweep, None)
            if slot is None:
                self._sweep = iter(list(self.table))
                return
            if slot in self.table and drop_expired(self.table[slot], self.kind, self.ttl, now) is None:
                del self.table[slot]


class ValueStateImpl(KvState):
    kind = "value"

    def value(self) -> Any:
        return self._read(self.table, self._slot())[1]

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self.table[self._slot()] = self._wrap(value)


class ListStateImpl(KvState):
    kind = "list"

    def get(self) -> list[Any]:
        slot = self._slot()
        items = self.table.get(slot)
        if not items:
            return []
        if self.ttl is None:
            return list(items)
        now, visible, kept = self.ttl.clock(), [], []
        for stamped in items:
            if self.ttl.expired(stamped, now):
                if self.ttl.return_expired:
                    visible.append(stamped.value)
            else:
                visible.append(stamped.value)
                kept.append(self.ttl.stamp(stamped.value) if self.ttl.update_on_read else stamped)
        if kept:
            self.table[slot] = kept
        else:
            del self.table[slot]
        return visible

    def add(self, value: Any) -> None:
        if value is None:
            raise JobError(f"operator {self.backend.operator!r}: list state {self.descriptor.name!r} "
                           "cannot hold None (Flink: 'You cannot add null to a ListState.')")
        self.table.setdefault(self._slot(), []).append(self._wrap(value))

    def add_all(self, values: Iterable[Any]) -> None:
        for value in values:
            self.add(value)

    def update(self, values: Iterable[Any]) -> None:
        self.clear()
        self.add_all(values)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        key, merged = self.backend.current_key, []
        for source in sources:
            merged += self.table.pop((key, source), [])
        if merged:
            self.table.setdefault((key, target), []).extend(merged)


class MapStateImpl(KvState):
    kind = "map"

    def _entries(self, create: bool = False) -> dict[Any, Any] | None:
        slot = self._slot()
        entries = self.table.get(slot)
        if entries is None and create:
            entries = self.table[slot] = {}
        return entries

    def _tidy(self) -> None:
        slot = (self.backend.current_key, self.namespace)
        if slot in self.table and not self.table[slot]:
            del self.table[slot]

    def get(self, key: Any) -> Any:
        entries = self._entries()
        value = None if entries is None else self._read(entries, key)[1]
        self._tidy()
        return value

    def put(self, key: Any, value: Any) -> None:
        entries = self._entries(create=True)
        assert entries is not None
        entries[key] = self._wrap(value)

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        for key, value in dict_value.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        entries = self._entries()
        if entries is not None:
            entries.pop(key, None)
            self._tidy()

    def contains(self, key: Any) -> bool:
        entries = self._entries()
        found = entries is not None and self._read(entries, key)[0]
        self._tidy()
        return found

    def items(self) -> list[tuple[Any, Any]]:
        entries = self._entries()
        if entries is None:
            return []
        pairs = []
        for key in list(entries):
            found, value = self._read(entries, key)
            if found:
                pairs.append((key, value))
        self._tidy()
        return pairs

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self.items()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class ReducingStateImpl(KvState):
    kind = "reducing"

    def _merge(self, a: Any, b: Any) -> Any:
        return self.descriptor.reduce_function(a, b)  # type: ignore[attr-defined]

    def _result(self, stored: Any) -> Any:
        return stored

    def _start(self, value: Any) -> Any:
        return value

    def _added(self, value: Any, current: Any) -> Any:
        return self._merge(current, value)

    def get(self) -> Any:
        found, value = self._read(self.table, self._slot())
        return self._result(value) if found else None

    def add(self, value: Any) -> None:
        slot = self._slot()
        found, current = self._read(self.table, slot)
        self.table[slot] = self._wrap(self._added(value, current) if found else self._start(value))

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        key, merged = self.backend.current_key, _MISSING
        for source in sources:
            found, value = self._read(self.table, (key, source))
            self.table.pop((key, source), None)
            if found:
                merged = value if merged is _MISSING else self._merge(merged, value)
        if merged is not _MISSING:
            found, current = self._read(self.table, (key, target))
            self.table[(key, target)] = self._wrap(self._merge(current, merged) if found else merged)


class AggregatingStateImpl(ReducingStateImpl):
    kind = "aggregating"

    def _merge(self, a: Any, b: Any) -> Any:
        return self.descriptor.agg_function.merge(a, b)  # type: ignore[attr-defined]

    def _result(self, stored: Any) -> Any:
        return self.descriptor.agg_function.get_result(stored)  # type: ignore[attr-defined]

    def _start(self, value: Any) -> Any:
        agg = self.descriptor.agg_function  # type: ignore[attr-defined]
        return agg.add(value, agg.create_accumulator())

    def _added(self, value: Any, current: Any) -> Any:
        return self.descriptor.agg_function.add(value, current)  # type: ignore[attr-defined]


_KINDS: dict[str, type[KvState]] = {
    c.kind: c for c in (ValueStateImpl, ListStateImpl, MapStateImpl, ReducingStateImpl, AggregatingStateImpl)}


class KeyedStateBackend:
    """All keyed state of one operator instance.

    Args:
        operator: the operator's name, for errors.
        max_parallelism: the number of key groups.
        clock: processing time in ms, for TTL (default: the wall clock).
    """

    def __init__(self, operator: str, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                 clock: Callable[[], int] | None = None) -> None:
        self.operator = operator
        self.max_parallelism = max_parallelism
        self.clock = clock or _now_ms
        self.current_key: Any = None
        self.tables: dict[str, Table] = {}
        self.kinds: dict[str, tuple[str, bool]] = {}  # name -> (kind, has TTL)
        self.states: dict[str, KvState] = {}

    def set_current_key(self, key: Any) -> None:
        self.current_key = canonical_key(key)

    def get_state(self, descriptor: StateDescriptor, kind: str | None = None) -> Any:
        """The state object of ``descriptor`` (the same object each time for one name).

        Raises:
            JobError: the name is taken by a state of another kind (or TTL setting), or the
                descriptor is not of ``kind``.
        """
        if not isinstance(descriptor, StateDescriptor):
            raise JobError(f"operator {self.operator!r}: get_state needs a state descriptor "
                           f"(ValueStateDescriptor...), got {type(descriptor).__name__}")
        wanted = (descriptor.kind, descriptor.ttl_config is not None and descriptor.ttl_config.is_enabled())
        if kind is not None and descriptor.kind != kind:
            raise JobError(f"operator {self.operator!r}: state {descriptor.name!r} is a {type(descriptor).__name__}, "
                           f"which get_{kind}_state does not take")
        known = self.kinds.setdefault(descriptor.name, wanted)
        if known != wanted:
            raise JobError(
                f"operator {self.operator!r}: state name {descriptor.name!r} is used by a {_shown(known)} state "
                f"and a {_shown(wanted)} one; give each state its own name")
        if descriptor.name not in self.states:
            self.states[descriptor.name] = _KINDS[descriptor.kind](self, descriptor)
        return self.states[descriptor.name]

    def on_record(self) -> None:
        """A record was processed: incremental TTL cleanup ``run_cleanup_for_every_record``."""
        for state in self.states.values():
            if state.ttl is not None and state.ttl.config.run_cleanup_for_every_record:
                state.cleanup_incrementally()

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """``{key group: {state name: (kind, has TTL, {(key, namespace): stored})}}``; with
        ``cleanup_full_snapshot`` expired entries are left out."""
        groups: dict[int, dict[str, Any]] = {}
        for name, table in self.tables.items():
            kind, has_ttl = self.kinds.get(name, ("value", False))
            state = self.states.get(name)
            ttl = state.ttl if state is not None else None
            drop = ttl is not None and ttl.config.cleanup_full_snapshot
            now = self.clock()
            for slot, stored in table.items():
                if drop and ttl is not None and (stored := drop_expired(stored, kind, ttl, now)) is None:
                    continue
                group = groups.setdefault(key_group_of(slot[0], self.max_parallelism), {})
                group.setdefault(name, (kind, has_ttl, {}))[2][slot] = _copied(stored)
        return groups

    def restore(self, groups: dict[int, dict[str, Any]], key_groups: KeyGroupRange) -> None:
        """Adds the entries of the key groups in ``key_groups``."""
        for group, states in groups.items():
            if group not in key_groups:
                continue
            for name, (kind, has_ttl, entries) in states.items():
                self.kinds.setdefault(name, (kind, has_ttl))
                table = self.tables.setdefault(name, {})
                for (key, namespace), stored in entries.items():
                    table[(canonical_key(key), namespace)] = stored


def _copied(stored: Any) -> Any:
    """A list or dict of list or map state copied, so that later writes miss the snapshot."""
    return list(stored) if isinstance(stored, list) else dict(stored) if isinstance(stored, dict) else stored


def _shown(kind: tuple[str, bool]) -> str:
    return f"{kind[0]}{' (with TTL)' if kind[1] else ''}"


__all__ = [
    "AggregatingStateImpl", "KeyedStateBackend", "KvState", "ListStateImpl", "MapStateImpl",
    "ReducingStateImpl", "ValueStateImpl",
]
