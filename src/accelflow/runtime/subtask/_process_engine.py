"""Process functions as pure engines (Flink's ``KeyedProcessOperator``, ``ProcessOperator`` and
the two-input ``CoStreamMap``/``CoStreamFlatMap``/``(Keyed)CoProcessOperator``).

Outputs of an element carry its timestamp; outputs of an event-time timer carry the timer's
timestamp; main outputs of a processing-time timer carry none (side outputs of any timer
carry the timer's timestamp), as in Flink.

Example:
    >>> from accelflow.dataflow.eventtime import KeyedProcessFunction
    >>> class Delay(KeyedProcessFunction):
    ...     def process_element(self, value, ctx):
    ...         ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
    ...     def on_timer(self, timestamp, ctx):
    ...         yield (ctx.get_current_key(), timestamp)
    >>> engine = KeyedProcessEngine(Delay(), "delay")
    >>> _ = engine.process_element("x", 5, key="k")
    >>> engine.advance_watermark(20).records
    [(('k', 15), 15)]
"""

from __future__ import annotations

from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow.eventtime import CoFlatMapFunction, CoMapFunction, TimeDomain
from accelflow.runtime.subtask._calls import function_object
from accelflow.runtime.subtask._engine_base import KeyedEngine, Outputs
from accelflow.runtime.subtask._timers import InternalTimer


class ProcessContext:
    """``ctx`` of ``process_element`` and (with :meth:`time_domain`) of ``on_timer``."""

    def __init__(self, engine: KeyedEngine) -> None:
        self._engine = engine
        self._timestamp: int | None = None
        self._outputs: Outputs | None = None
        self._domain: TimeDomain | None = None

    def bind(self, timestamp: int | None, outputs: Outputs, domain: TimeDomain | None = None) -> ProcessContext:
        self._timestamp, self._outputs, self._domain = timestamp, outputs, domain
        return self

    def timestamp(self) -> int | None:
        return self._timestamp

    def timer_service(self) -> Any:
        return self._engine.user_timer_service

    def get_current_key(self) -> Any:
        return self._engine.current_key

    def output(self, output_tag: Any, value: Any) -> None:
        assert self._outputs is not None
        self._outputs.emit_side(output_tag, value, self._timestamp)

    def time_domain(self) -> TimeDomain | None:
        return self._domain


#: the methods a class defines to be built once per subtask (see ``._calls``)
_METHODS = ("process_element", "process_element1", "map1", "flat_map1", "process_broadcast_element")


class _FunctionEngine(KeyedEngine):
    def __init__(self, function: Any, name: str, **engine: Any) -> None:
        super().__init__(name, **engine)
        self.function = function_object(function, *_METHODS)
        self.ctx = ProcessContext(self)

    def open(self) -> None:
        """Calls the function's ``open(runtime_context)``, whose ``get_state`` gives keyed state."""
        if callable(getattr(self.function, "open", None)):
            self.function.open(self.context)

    def close(self) -> None:
        if callable(getattr(self.function, "close", None)):
            self.function.close()

    def _element(self, method: Any, value: Any, timestamp: int | None, key: Any) -> Outputs:
        out = Outputs()
        if self.keyed:
            self.set_current_key(key)
        out.collect(method(value, self.ctx.bind(timestamp, out)), timestamp)
        if self.backend is not None:
            self.backend.on_record()
        return out

    def on_event_time(self, timer: InternalTimer, out: Outputs) -> None:
        ctx = self.ctx.bind(timer.timestamp, out, TimeDomain.EVENT_TIME)
        out.collect(self.function.on_timer(timer.timestamp, ctx), timer.timestamp)

    def on_processing_time(self, timer: InternalTimer, out: Outputs) -> None:
        ctx = self.ctx.bind(timer.timestamp, out, TimeDomain.PROCESSING_TIME)
        out.collect(self.function.on_timer(timer.timestamp, ctx), None)


class KeyedProcessEngine(_FunctionEngine):
    """A ``KeyedProcessFunction`` (or, with ``keyed=False``, a ``ProcessFunction`` on a
    non-keyed stream: no keyed state, and registering a timer fails as in Flink)."""

    def process_element(self, value: Any, timestamp: int | None, key: Any = None) -> Outputs:
        """Calls ``process_element(value, ctx)`` for ``value`` of ``key``."""
        return self._element(self.function.process_element, value, timestamp, key)


class ProcessEngine(KeyedProcessEngine):
    """A ``ProcessFunction`` on a non-keyed stream."""

    def __init__(self, function: Any, name: str, **engine: Any) -> None:
        super().__init__(function, name, keyed=False, **engine)


class CoProcessEngine(_FunctionEngine):
    """Two inputs sharing one function: a ``CoMapFunction``, ``CoFlatMapFunction``,
    ``CoProcessFunction`` or (``keyed=True``) ``KeyedCoProcessFunction``; the state and timers
    of a key are shared by both inputs."""

    def __init__(self, function: Any, name: str, **engine: Any) -> None:
        super().__init__(function, name, **engine)
        fn = self.function
        if isinstance(fn, CoMapFunction):
            self.methods = (_one(fn.map1), _one(fn.map2))
        elif isinstance(fn, CoFlatMapFunction):
            self.methods = (_many(fn.flat_map1), _many(fn.flat_map2))
        elif hasattr(fn, "process_element1") and hasattr(fn, "process_element2"):
            self.methods = (fn.process_element1, fn.process_element2)
        else:
            raise ConfigError(f"connect(...) needs a CoMapFunction, CoFlatMapFunction or (Keyed)CoProcessFunction, "
                              f"got {type(fn).__name__}", key=f"operator {name!r}")

    def process_element1(self, value: Any, timestamp: int | None, key: Any = None) -> Outputs:
        return self._element(self.methods[0], value, timestamp, key)

    def process_element2(self, value: Any, timestamp: int | None, key: Any = None) -> Outputs:
        return self._element(self.methods[1], value, timestamp, key)

    def process_element(self, value: Any, timestamp: int | None, key: Any = None, input_index: int = 0) -> Outputs:
        """``value`` of input ``input_index`` (0: the first stream, 1: the connected one)."""
        return self._element(self.methods[input_index], value, timestamp, key)


def _one(fn: Any) -> Any:
    return lambda value, ctx: [fn(value)]


def _many(fn: Any) -> Any:
    return lambda value, ctx: fn(value)


__all__ = ["CoProcessEngine", "KeyedProcessEngine", "ProcessContext", "ProcessEngine"]
