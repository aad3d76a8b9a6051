"""Keyed state contracts, as PyFlink's ``pyflink.datastream.state``: descriptors name a state
and its kind; the runtime's keyed state backend gives back a state object scoped to the
current key (and window). ``StateTtlConfig`` makes entries expire.

Example:
    >>> from datetime import timedelta
    >>> ttl = (StateTtlConfig.new_builder(timedelta(minutes=5))
    ...        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
    ...        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
    ...        .cleanup_full_snapshot().build())
    >>> descriptor = ValueStateDescriptor("last-seen", Types.LONG())
    >>> descriptor.enable_time_to_live(ttl)
    >>> descriptor.get_name(), descriptor.ttl_config.ttl_ms
    ('last-seen', 300000)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow._time import at_least, to_millis
from accelflow.dataflow._types import Types

__all__ = [
    "AggregatingState", "AggregatingStateDescriptor", "KeyedStateStore", "ListState",
    "ListStateDescriptor", "MapState", "MapStateDescriptor", "ReducingState",
    "ReducingStateDescriptor", "State", "StateDescriptor", "StateTtlConfig", "ValueState",
    "ValueStateDescriptor",
]


class StateTtlConfig:
    """When keyed state entries expire (Flink's ``StateTtlConfig``); processing time only.

    Attributes:
        ttl_ms: an entry expires ``ttl_ms`` after its last write (or read, with
            ``OnReadAndWrite``).
    """

    class UpdateType(Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(Enum):
        ProcessingTime = 0

    def __init__(self, ttl_ms: int, update_type: StateTtlConfig.UpdateType,
                 state_visibility: StateTtlConfig.StateVisibility, cleanup_full_snapshot: bool,
                 incremental_cleanup_size: int | None, run_cleanup_for_every_record: bool) -> None:
        self.ttl_ms = ttl_ms
        self.update_type = update_type
        self.state_visibility = state_visibility
        self.cleanup_full_snapshot = cleanup_full_snapshot
        self.incremental_cleanup_size = incremental_cleanup_size
        self.run_cleanup_for_every_record = run_cleanup_for_every_record

    @staticmethod
    def new_builder(ttl: Any) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def is_enabled(self) -> bool:
        return self.update_type is not StateTtlConfig.UpdateType.Disabled

    def get_ttl(self) -> int:
        return self.ttl_ms

    class Builder:
        """``StateTtlConfig.new_builder(ttl)...build()``."""

        def __init__(self, ttl: Any) -> None:
            what = "StateTtlConfig.new_builder(ttl)"
            self._ttl = at_least(to_millis(ttl, what=what), 1, what=what, shown=ttl)
            self._update = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._full_snapshot = False
            self._incremental: int | None = None
            self._every_record = False

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: StateTtlConfig.StateVisibility) -> StateTtlConfig.Builder:
            self._visibility = visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(self, characteristic: Any) -> StateTtlConfig.Builder:
            return self  # processing time is the only one, as in Flink

        def set_ttl(self, ttl: Any) -> StateTtlConfig.Builder:
            self._ttl = at_least(to_millis(ttl, what="StateTtlConfig.set_ttl"), 1, what="StateTtlConfig.set_ttl", shown=ttl)
            return self

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Leave expired entries out of full snapshots (checkpoints)."""
            self._full_snapshot = True
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> StateTtlConfig.Builder:
            """Check ``cleanup_size`` entries for expiry on each state access (and each record)."""
            if not isinstance(cleanup_size, int) or cleanup_size < 1:
                raise ConfigError(f"must be a positive int, got {cleanup_size!r}",
                                  key="StateTtlConfig.cleanup_incrementally(cleanup_size)")
            self._incremental = cleanup_size
            self._every_record = bool(run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int) -> StateTtlConfig.Builder:
            return self  # no RocksDB here: expired entries go on access and in snapshots

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            self._incremental = None
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(self._ttl, self._update, self._visibility, self._full_snapshot,
                                  self._incremental, self._every_record)


class StateDescriptor(ABC):
    """Names a keyed state; a descriptor's name is unique per operator (per kind)."""

    #: the state's kind, e.g. ``"value"``; two descriptors of one name must agree on it
    kind = ""

    def __init__(self, name: str, type_info: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a state's name must be a non-empty string, got {name!r}", key=type(self).__name__)
        self.name = name
        self.type_info = type_info
        self.ttl_config: StateTtlConfig | None = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        if not isinstance(ttl_config, StateTtlConfig):
            raise ConfigError(f"needs a StateTtlConfig, got {type(ttl_config).__name__}",
                              key=f"{type(self).__name__}({self.name!r}).enable_time_to_live")
        self.ttl_config = ttl_config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, Types.MAP(key_type_info, value_type_info))


def _reducer(fn: Any, what: str) -> Callable[[Any, Any], Any]:
    if hasattr(fn, "reduce"):
        return fn.reduce  # type: ignore[no-any-return]
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    raise ConfigError(f"needs a ReduceFunction or a function (a, b) -> value, got {type(fn).__name__}", key=what)


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        super().__init__(name, type_info)
        self.reduce_function = _reducer(reduce_function, f"ReducingStateDescriptor({name!r})")


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
        missing = [m for m in ("create_accumulator", "add", "get_result") if not hasattr(agg_function, m)]
        if missing:
            raise ConfigError(f"needs an AggregateFunction; {type(agg_function).__name__} has no "
                              f"{', '.join(missing)}", key=f"AggregatingStateDescriptor({name!r})")
        self.agg_function = agg_function


class State(ABC):
    """A keyed state; all its methods act on the current key (and window)."""

    @abstractmethod
    def clear(self) -> None: ...


class ValueState(State):
    @abstractmethod
    def value(self) -> Any: ...

    @abstractmethod
    def update(self, value: Any) -> None: ...


class ListState(State):
    @abstractmethod
    def get(self) -> Iterable[Any]: ...

    @abstractmethod
    def add(self, value: Any) -> None: ...

    @abstractmethod
    def add_all(self, values: Iterable[Any]) -> None: ...

    @abstractmethod
    def update(self, values: Iterable[Any]) -> None: ...


class MapState(State):
    @abstractmethod
    def get(self, key: Any) -> Any: ...

    @abstractmethod
    def put(self, key: Any, value: Any) -> None: ...

    @abstractmethod
    def put_all(self, dict_value: dict[Any, Any]) -> None: ...

    @abstractmethod
    def remove(self, key: Any) -> None: ...

    @abstractmethod
    def contains(self, key: Any) -> bool: ...

    @abstractmethod
    def items(self) -> Iterable[tuple[Any, Any]]: ...

    @abstractmethod
    def keys(self) -> Iterable[Any]: ...

    @abstractmethod
    def values(self) -> Iterable[Any]: ...

    @abstractmethod
    def is_empty(self) -> bool: ...


class ReducingState(State):
    @abstractmethod
    def get(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any) -> None: ...


class AggregatingState(ReducingState):
    pass


class KeyedStateStore(ABC):
    """What gives state objects: a runtime context, a window's ``window_state()``..."""

    @abstractmethod
    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState: ...

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState: ...

    @abstractmethod
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState: ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState: ...

    @abstractmethod
    def get_aggregating_state(self, state_descriptor: AggregatingStateDescriptor) -> AggregatingState: ...
