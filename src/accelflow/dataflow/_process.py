"""Process functions, timers, side outputs and the two-input functions, with PyFlink's names
(``pyflink.datastream.functions``).

Example (an alert when a key's score stays high for 30 s)::

    class Alert(KeyedProcessFunction):
        def open(self, runtime_context):
            self.since = runtime_context.get_state(ValueStateDescriptor("since", Types.LONG()))
        def process_element(self, value, ctx):
            if value.score > 0.9 and self.since.value() is None:
                self.since.update(ctx.timestamp())
                ctx.timer_service().register_event_time_timer(ctx.timestamp() + 30_000)
            elif value.score <= 0.9:
                self.since.clear()
        def on_timer(self, timestamp, ctx):
            if self.since.value() is not None:
                yield ("alert", ctx.get_current_key(), timestamp)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from enum import Enum
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow._functions import RichFunction

__all__ = [
    "CoFlatMapFunction", "CoMapFunction", "CoProcessFunction", "KeyedCoProcessFunction",
    "KeyedProcessFunction", "OutputTag", "ProcessFunction", "ProcessJoinFunction", "TimeDomain",
    "TimerService",
]


class OutputTag:
    """Names a side output (``ctx.output(tag, value)``, ``stream.get_side_output(tag)``).

    Example:
        >>> OutputTag("late-data") == OutputTag("late-data")
        True
    """

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ConfigError(f"an OutputTag needs a non-empty name, got {tag_id!r}", key="OutputTag(tag_id)")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(self.tag_id)

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"


class TimeDomain(Enum):
    """Which clock fired a timer (``ctx.time_domain()`` in ``on_timer``)."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


class TimerService(ABC):
    """Timers of the current key, and the operator's clocks."""

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None: ...


class _Context(ABC):
    """What ``process_element`` gets: ``timestamp()``, ``timer_service()``,
    ``output(tag, value)`` and, on a keyed stream, ``get_current_key()``."""

    @abstractmethod
    def timestamp(self) -> int | None: ...

    @abstractmethod
    def timer_service(self) -> TimerService: ...

    @abstractmethod
    def output(self, output_tag: OutputTag, value: Any) -> None: ...


class ProcessFunction(RichFunction, ABC):
    """One input, any number of outputs per element (yield or return them). On a non-keyed
    stream it cannot set timers."""

    Context = _Context

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


class KeyedProcessFunction(RichFunction, ABC):
    """Like :class:`ProcessFunction`, on a keyed stream: keyed state and timers."""

    Context = _Context

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """Called when a timer set through ``ctx.timer_service()`` fires; ``ctx`` also has
        ``time_domain()``."""
        return None


class CoMapFunction(RichFunction, ABC):
    """Maps each element of two connected streams: ``map1`` for the first, ``map2`` for the second."""

    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(RichFunction, ABC):
    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]: ...


class CoProcessFunction(RichFunction, ABC):
    """Two inputs; no timers unless keyed (:class:`KeyedCoProcessFunction`)."""

    Context = _Context

    @abstractmethod
    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


class KeyedCoProcessFunction(CoProcessFunction):
    """Two connected keyed streams: keyed state and timers shared by both inputs."""


class ProcessJoinFunction(RichFunction, ABC):
    """An interval join's pairs: ``ctx`` has ``get_left_timestamp()``,
    ``get_right_timestamp()``, ``get_timestamp()`` (the later of the two) and ``output``."""

    @abstractmethod
    def process_element(self, left: Any, right: Any, ctx: Any) -> Iterable[Any] | None: ...
