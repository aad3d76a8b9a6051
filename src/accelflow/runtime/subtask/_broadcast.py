"""The broadcast state pattern's operator (Flink's ``CoBroadcastWithNonKeyedOperator`` and
``CoBroadcastWithKeyedOperator``): input 0 is the (keyed or not) stream, input 1 the
broadcast stream, whose every record reaches every subtask.

Broadcast state is one dict per ``MapStateDescriptor``, written only by
``process_broadcast_element`` (so every subtask holds the same copy) and read-only
elsewhere. It is in checkpoints with the keyed state and timers; on restore, at any
parallelism, subtask ``i`` takes the copy of old subtask ``i % old parallelism`` (they are
equal), as Flink redistributes broadcast state.

Example:
    >>> from accelflow.dataflow.eventtime import MapStateDescriptor
    >>> rates = MapStateDescriptor("rates")
    >>> states = BroadcastStates("op", (rates,))
    >>> states.writable(rates).put("eur", 2)
    >>> states.read_only(rates).get("eur"), list(states.read_only(rates).items())
    (2, [('eur', 2)])
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from accelflow._errors import JobError
from accelflow.dataflow import BroadcastProcessSpec, RuntimeContext
from accelflow.runtime.subtask._engine_base import Outputs
from accelflow.runtime.subtask._event_operators import CoProcessOp
from accelflow.runtime.subtask._operators import runs
from accelflow.runtime.subtask._process_engine import ProcessContext, _FunctionEngine


class ReadOnlyBroadcastState:
    """``ctx.get_broadcast_state(descriptor)`` where it may only be read."""

    def __init__(self, entries: dict[Any, Any], name: str, operator: str) -> None:
        self._entries = entries
        self._name = name
        self._operator = operator

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._entries.items())

    def keys(self) -> list[Any]:
        return list(self._entries)

    def values(self) -> list[Any]:
        return list(self._entries.values())

    def is_empty(self) -> bool:
        return not self._entries

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._entries))

    def __contains__(self, key: Any) -> bool:
        return key in self._entries

    def __getitem__(self, key: Any) -> Any:
        return self._entries[key]

    def _read_only(self, method: str) -> JobError:
        return JobError(f"operator {self._operator!r}: broadcast state {self._name!r} is read-only here "
                        f"({method}): only process_broadcast_element may change it, so that every subtask "
                        "keeps the same copy")

    def put(self, key: Any, value: Any) -> None:
        raise self._read_only("put")

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        raise self._read_only("put_all")

    def remove(self, key: Any) -> None:
        raise self._read_only("remove")

    def clear(self) -> None:
        raise self._read_only("clear")


class BroadcastState(ReadOnlyBroadcastState):
    """``ctx.get_broadcast_state(descriptor)`` in ``process_broadcast_element``."""

    def put(self, key: Any, value: Any) -> None:
        self._entries[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self._entries.update(dict_value)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()


class BroadcastStates:
    """The broadcast states of one operator, by descriptor name."""

    def __init__(self, operator: str, descriptors: tuple[Any, ...]) -> None:
        self.operator = operator
        self.entries: dict[str, dict[Any, Any]] = {d.name: {} for d in descriptors}

    def _entries(self, descriptor: Any) -> tuple[dict[Any, Any], str]:
        name = getattr(descriptor, "name", descriptor)
        if name not in self.entries:
            raise JobError(f"operator {self.operator!r}: the broadcast state {name!r} does not exist: check for "
                           "typos in the state descriptor, or pass it to the broadcast(...) call "
                           f"(declared: {sorted(self.entries)})")
        return self.entries[name], name

    def read_only(self, descriptor: Any) -> ReadOnlyBroadcastState:
        return ReadOnlyBroadcastState(*self._entries(descriptor), self.operator)

    def writable(self, descriptor: Any) -> BroadcastState:
        return BroadcastState(*self._entries(descriptor), self.operator)

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        return copy.deepcopy(self.entries)

    def restore(self, copies: list[dict[str, dict[Any, Any]]], index: int) -> None:
        """Takes the copy of old subtask ``index % len(copies)`` (new state names start empty)."""
        if copies:
            for name, entries in copies[index % len(copies)].items():
                if name in self.entries:
                    self.entries[name] = copy.deepcopy(entries)


class BroadcastContext(ProcessContext):
    """``ctx`` of ``process_element`` / ``on_timer`` (read-only broadcast state) and, with
    ``writable``, of ``process_broadcast_element``."""

    def __init__(self, engine: BroadcastEngine, writable: bool) -> None:
        super().__init__(engine)
        self._writable = writable

    def get_broadcast_state(self, state_descriptor: Any) -> ReadOnlyBroadcastState:
        states: BroadcastStates = self._engine.broadcast  # type: ignore[attr-defined]
        return states.writable(state_descriptor) if self._writable else states.read_only(state_descriptor)

    def current_processing_time(self) -> int:
        return self._engine.timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._engine.timers.current_watermark()

    def timer_service(self) -> Any:
        if self._writable:
            raise JobError(f"operator {self._engine.name!r}: process_broadcast_element has no current key, so no "
                           "timers: register them in process_element or on_timer")
        return super().timer_service()

    def get_current_key(self) -> Any:
        if self._writable:
            raise JobError(f"operator {self._engine.name!r}: process_broadcast_element has no current key: the "
                           "broadcast stream is not keyed (use apply_to_keyed_state to reach every key's state)")
        return super().get_current_key()

    def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
        """``function(key, state)`` for every key of this subtask with state ``state_descriptor``."""
        engine = self._engine
        backend = engine.backend
        if not self._writable or backend is None:
            raise JobError(f"operator {engine.name!r}: apply_to_keyed_state is for process_broadcast_element of a "
                           "KeyedBroadcastProcessFunction")
        state = backend.get_state(state_descriptor)
        state.set_current_namespace(None)
        keys = {key for key, namespace in backend.tables.get(state_descriptor.name, {}) if namespace is None}
        current = engine.current_key
        for key in list(keys):
            engine.set_current_key(key)
            function(key, state)
        engine.set_current_key(current)


class BroadcastEngine(_FunctionEngine):
    """A (Keyed)BroadcastProcessFunction: input 0's records with read-only broadcast state
    (and, keyed, the record's key's state and timers), input 1's with writable broadcast state."""

    def __init__(self, function: Any, name: str, descriptors: tuple[Any, ...], **engine: Any) -> None:
        super().__init__(function, name, **engine)
        self.broadcast = BroadcastStates(name, descriptors)
        self.ctx = BroadcastContext(self, writable=False)
        self.broadcast_ctx = BroadcastContext(self, writable=True)

    def reset(self) -> None:
        """A rollback in place: broadcast state goes back to empty too (``restore`` follows)."""
        super().reset()
        for entries in self.broadcast.entries.values():
            entries.clear()

    def process_element(self, value: Any, timestamp: int | None, key: Any = None, input_index: int = 0) -> Outputs:
        if input_index == 0:
            return self._element(self.function.process_element, value, timestamp, key)
        out = Outputs()
        out.collect(self.function.process_broadcast_element(value, self.broadcast_ctx.bind(timestamp, out)), timestamp)
        return out


@runs(BroadcastProcessSpec)
class BroadcastProcessOp(CoProcessOp):
    """``stream.connect(rules.broadcast(descriptors)).process(fn)``; its snapshot holds the
    keyed state and timers per key group and this subtask's copy of the broadcast state."""

    def make_engine(self, ctx: RuntimeContext) -> Any:
        spec = self.node.spec
        assert isinstance(spec, BroadcastProcessSpec)
        return BroadcastEngine(spec.fn, self.node.name, spec.descriptors, keyed=spec.keyed,
                               max_parallelism=self.max_parallelism, runtime_context=ctx)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return {"keyed": self.state.snapshot(self.engine), "broadcast": self.engine.broadcast.snapshot()}

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        states = [s for s in states if s]
        self.state.restore(self.engine, [s["keyed"] for s in states], index, parallelism)
        self.engine.broadcast.restore([s["broadcast"] for s in states], index)


__all__ = ["BroadcastEngine", "BroadcastProcessOp", "BroadcastState", "BroadcastStates", "ReadOnlyBroadcastState"]
