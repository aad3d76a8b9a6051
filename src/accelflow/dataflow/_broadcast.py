"""The broadcast state pattern (PyFlink's ``BroadcastProcessFunction`` and
``KeyedBroadcastProcessFunction``): ``rules.broadcast(MapStateDescriptor(...))`` sends every
rule to every subtask of ``stream.connect(broadcast_stream).process(fn)``;
``process_broadcast_element(value, ctx)`` writes ``ctx.get_broadcast_state(descriptor)``,
the same in every subtask, and ``process_element(value, ctx)`` reads it.

Example:
    >>> class Rules(BroadcastProcessFunction):
    ...     def process_element(self, value, ctx):
    ...         yield value * (ctx.get_broadcast_state(FACTORS).get("x") or 1)
    ...     def process_broadcast_element(self, value, ctx):
    ...         ctx.get_broadcast_state(FACTORS).put("x", value)
    >>> FACTORS = MapStateDescriptor("factors")
    >>> BroadcastProcessSpec(Rules(), (FACTORS,)).kind
    'broadcast_process'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from accelflow._errors import ConfigError
from accelflow.dataflow._functions import RichFunction
from accelflow.dataflow._specs import FunctionSpec
from accelflow.dataflow._state import MapStateDescriptor

__all__ = [
    "BroadcastProcessFunction", "BroadcastProcessSpec", "KeyedBroadcastProcessFunction",
    "KeyedBroadcastProcessSpec", "check_broadcast_descriptors",
]


class BroadcastProcessFunction(RichFunction, ABC):
    """A non-keyed stream connected to a broadcast stream.

    ``process_element(value, ctx)``: a record of the non-broadcast stream; its
    ``ctx.get_broadcast_state(descriptor)`` is read-only (``get``, ``contains``, ``items``,
    ``keys``, ``values``, ``is_empty``). ``process_broadcast_element(value, ctx)``: a record
    of the broadcast stream, which every subtask gets; its broadcast state is writable
    (``put``, ``put_all``, ``remove``, ``clear`` too). Both contexts have ``timestamp()``,
    ``current_processing_time()``, ``current_watermark()`` and ``output(tag, value)``.
    """

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...


class KeyedBroadcastProcessFunction(RichFunction, ABC):
    """A keyed stream connected to a broadcast stream: as :class:`BroadcastProcessFunction`,
    and ``process_element``'s ``ctx`` has ``timer_service()`` and ``get_current_key()``
    (keyed state from the runtime context in ``open``); ``on_timer(timestamp, ctx)`` is called
    when a timer fires (its broadcast state read-only); ``process_broadcast_element``'s ``ctx``
    has ``apply_to_keyed_state(descriptor, function)``, calling ``function(key, state)`` for
    every key of this subtask that has that state."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


def check_broadcast_descriptors(descriptors: tuple[Any, ...], where: str) -> None:
    """Broadcast state is map state, each named once (Flink's ``MapStateDescriptor`` only).

    Raises:
        ConfigError: none given, one is not a ``MapStateDescriptor``, or a name twice.
    """
    if not descriptors:
        raise ConfigError("the broadcast state pattern needs at least one MapStateDescriptor: "
                          "rules.broadcast(MapStateDescriptor('rules', Types.STRING(), Types.PICKLED_BYTE_ARRAY()))",
                          key=where)
    names = set()
    for d in descriptors:
        if not isinstance(d, MapStateDescriptor):
            raise ConfigError(f"broadcast state is map state: broadcast() takes MapStateDescriptors, got "
                              f"{type(d).__name__} ({d!r})", key=where)
        if d.name in names:
            raise ConfigError(f"broadcast state {d.name!r} is declared twice: give each MapStateDescriptor its "
                              "own name", key=where)
        names.add(d.name)


@dataclass(frozen=True, slots=True)
class BroadcastProcessSpec(FunctionSpec):
    """``stream.connect(rules.broadcast(descriptors)).process(BroadcastProcessFunction)``:
    input 0 the stream, input 1 the broadcast stream (every record to every subtask)."""

    kind: ClassVar[str] = "broadcast_process"
    inputs: ClassVar[int] = 2
    needs: ClassVar[type] = BroadcastProcessFunction
    descriptors: tuple[Any, ...] = ()

    def check(self, where: str) -> None:
        fn, needs = self.fn, self.needs
        if not (isinstance(fn, needs) or (isinstance(fn, type) and issubclass(fn, needs))):
            keyed = "a keyed stream" if self.keyed else "a non-keyed stream"
            raise ConfigError(f"{keyed} connected to a broadcast stream needs a {needs.__name__} (process_element "
                              f"and process_broadcast_element), got {type(fn).__name__}", key=where)
        check_broadcast_descriptors(self.descriptors, where)


@dataclass(frozen=True, slots=True)
class KeyedBroadcastProcessSpec(BroadcastProcessSpec):
    """``keyed.connect(broadcast_stream).process(KeyedBroadcastProcessFunction)``: keyed state
    and timers for the keyed input's records."""

    keyed: ClassVar[bool] = True
    needs: ClassVar[type] = KeyedBroadcastProcessFunction
