"""What every event-time engine shares: the :class:`Outputs` a call returns, the runtime
context that gives keyed state (``get_state``...), the user's timer service, and
:class:`KeyedEngine` (a state backend, a timer service, the current key, snapshots per key
group and restore on any parallelism).

Example:
    >>> out = Outputs()
    >>> out.emit("a", 10); out.emit_side("late", "b", 3)
    >>> out.records, out.side
    ([('a', 10)], [('late', 'b', 3)])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import KeyedStateStore, OutputTag, TimerService
from accelflow.runtime.subtask._keyed_state import KeyedStateBackend
from accelflow.runtime.subtask._keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from accelflow.runtime.subtask._keys import canonical_key
from accelflow.runtime.subtask._timers import InternalTimer, InternalTimerService

#: Flink's message for a timer on a non-keyed stream
NO_TIMERS = "Setting timers is only supported on a keyed streams."
#: Flink's message for keyed state on a non-keyed stream
NO_KEYED_STATE = "Keyed state can only be used on a 'keyed stream', i.e., after a 'key_by()' operation."


def tag_name(tag: Any) -> str:
    """The name of a side output: an :class:`OutputTag`'s, or a plain string."""
    if isinstance(tag, OutputTag):
        return tag.tag_id
    if isinstance(tag, str) and tag:
        return tag
    raise JobError(f"a side output needs an OutputTag (or its name), got {type(tag).__name__} {tag!r}")


class Outputs:
    """What one engine call emitted, in order: ``records`` are ``(value, timestamp)`` of the
    main output, ``side`` are ``(tag name, value, timestamp)``; a timestamp is ``None`` where
    the record has none (outputs of processing-time timers)."""

    __slots__ = ("records", "side")

    def __init__(self) -> None:
        self.records: list[tuple[Any, int | None]] = []
        self.side: list[tuple[str, Any, int | None]] = []

    def emit(self, value: Any, timestamp: int | None) -> None:
        self.records.append((value, timestamp))

    def emit_side(self, tag: Any, value: Any, timestamp: int | None) -> None:
        self.side.append((tag_name(tag), value, timestamp))

    def collect(self, results: Iterable[Any] | None, timestamp: int | None) -> None:
        """Emits what a user function returned or yielded (``None``: nothing)."""
        if results is None:
            return
        try:
            values = iter(results)
        except TypeError:
            raise JobError(f"a function must return or yield its outputs (an iterable, or None for "
                           f"none), got {type(results).__name__} {results!r}") from None
        for value in values:
            self.records.append((value, timestamp))

    def extend(self, other: Outputs) -> None:
        self.records += other.records
        self.side += other.side

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outputs) and (self.records, self.side) == (other.records, other.side)

    def __repr__(self) -> str:
        return f"Outputs(records={self.records!r}, side={self.side!r})"


class StateRuntimeContext(KeyedStateStore):
    """The ``runtime_context`` a function's ``open`` gets in an event-time operator: PyFlink's
    ``get_state`` family on top of the subtask's ``RuntimeContext`` (whose attributes it
    forwards), and PyFlink's ``get_index_of_this_subtask()``-style getters."""

    def __init__(self, operator: str, backend: KeyedStateBackend | None, base: Any = None) -> None:
        self._operator = operator
        self._backend = backend
        self._base = base

    def _state(self, descriptor: Any, kind: str) -> Any:
        if self._backend is None:
            raise JobError(f"operator {self._operator!r}: {NO_KEYED_STATE}")
        state = self._backend.get_state(descriptor, kind)
        state.set_current_namespace(None)  # the key's own state, not a window's
        return state

    def get_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "value")

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "list")

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "map")

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "reducing")

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "aggregating")

    def get_task_name(self) -> str:
        return str(getattr(self._base, "task_name", self._operator))

    def get_index_of_this_subtask(self) -> int:
        return int(getattr(self._base, "index_of_this_subtask", 0))

    def get_number_of_parallel_subtasks(self) -> int:
        return int(getattr(self._base, "number_of_parallel_subtasks", 1))

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._backend.max_parallelism if self._backend is not None else DEFAULT_MAX_PARALLELISM

    def get_attempt_number(self) -> int:
        return int(getattr(self._base, "attempt_number", 0))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or self._base is None:
            raise AttributeError(name)
        return getattr(self._base, name)


class UserTimerService(TimerService):
    """``ctx.timer_service()`` of a process function: timers of the current key."""

    def __init__(self, engine: KeyedEngine) -> None:
        self._engine = engine

    def current_processing_time(self) -> int:
        return self._engine.timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._engine.timers.current_watermark()

    def _key(self) -> Any:
        if not self._engine.keyed:
            raise JobError(f"operator {self._engine.name!r}: {NO_TIMERS}")
        return self._engine.current_key

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._engine.timers.register_processing_time_timer(self._key(), None, timestamp)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._engine.timers.register_event_time_timer(self._key(), None, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._engine.timers.delete_processing_time_timer(self._key(), None, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._engine.timers.delete_event_time_timer(self._key(), None, timestamp)


class KeyedEngine:
    """The scaffolding of an engine: keyed state, timers and the current key.

    Args:
        name: the operator's name (errors name it).
        keyed: whether the input is a keyed stream (else no state, no timers).
        max_parallelism: the number of key groups.
        clock: processing time in ms for state TTL (default: the wall clock); the timers'
            processing time is only what :meth:`advance_processing_time` says.
        runtime_context: the subtask's ``RuntimeContext``, forwarded by :attr:`context`.
    """

    def __init__(self, name: str, *, keyed: bool = True, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                 clock: Callable[[], int] | None = None, runtime_context: Any = None) -> None:
        self.name = name
        self.keyed = keyed
        self.max_parallelism = max_parallelism
        self.backend = KeyedStateBackend(name, max_parallelism, clock) if keyed else None
        self.timers = InternalTimerService(max_parallelism)
        self.context = StateRuntimeContext(name, self.backend, runtime_context)
        self.user_timer_service = UserTimerService(self)
        self.current_key: Any = None

    def set_current_key(self, key: Any) -> None:
        self.current_key = canonical_key(key)
        if self.backend is not None:
            self.backend.set_current_key(self.current_key)

    def reset(self) -> None:
        """Drop every key's state and every timer, and go back to no watermark (a rollback in
        place: ``restore`` follows). The state objects user code took in ``open()`` stay valid."""
        if self.backend is not None:
            for table in self.backend.tables.values():
                table.clear()
        self.timers.reset()
        self.current_key = None

    def advance_watermark(self, watermark: int) -> Outputs:
        """The input watermark advanced (the caller forwards it downstream after these outputs)."""
        out = Outputs()
        for timer in self.timers.advance_watermark(watermark):
            self.set_current_key(timer.key)
            self.on_event_time(timer, out)
        return out

    def advance_processing_time(self, now: int) -> Outputs:
        """The processing time is now ``now`` (ms): fires the due processing-time timers."""
        out = Outputs()
        for timer in self.timers.advance_processing_time(now):
            self.set_current_key(timer.key)
            self.on_processing_time(timer, out)
        return out

    def on_event_time(self, timer: InternalTimer, out: Outputs) -> None:
        """An event-time timer fired (the current key is set to its key)."""

    def on_processing_time(self, timer: InternalTimer, out: Outputs) -> None:
        """A processing-time timer fired (the current key is set to its key)."""

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """Keyed state and timers per key group: ``{group: {"state": ..., "timers": ...}}``."""
        groups: dict[int, dict[str, Any]] = {}
        state = self.backend.snapshot() if self.backend is not None else {}
        for group, part in state.items():
            groups.setdefault(group, {})["state"] = part
        for group, part in self.timers.snapshot().items():
            groups.setdefault(group, {})["timers"] = part
        return groups

    def restore(self, states: Iterable[dict[int, dict[str, Any]]], key_group_range: KeyGroupRange) -> None:
        """Takes back the key groups in ``key_group_range`` from ``states`` (the snapshots of
        every subtask of the run restored from, at any parallelism)."""
        for snapshot in states:
            for group, part in (snapshot or {}).items():
                if group not in key_group_range:
                    continue
                if "state" in part and self.backend is not None:
                    self.backend.restore({group: part["state"]}, key_group_range)
                if "timers" in part:
                    self.timers.restore({group: part["timers"]}, key_group_range, canonical_key)


__all__ = ["NO_KEYED_STATE", "NO_TIMERS", "KeyedEngine", "Outputs", "StateRuntimeContext", "UserTimerService", "tag_name"]
