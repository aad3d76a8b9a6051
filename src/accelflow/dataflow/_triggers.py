"""Triggers: when a window's pane is evaluated (PyFlink's ``Trigger`` and its built-ins).

A trigger keeps no state of its own: what it must remember lives in partitioned state from
``ctx.get_partitioned_state(descriptor)`` (scoped to the key and the window).

Example:
    >>> TriggerResult.FIRE_AND_PURGE.is_fire(), TriggerResult.FIRE_AND_PURGE.is_purge()
    (True, True)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow._state import ReducingStateDescriptor
from accelflow.dataflow._time import to_millis


class TriggerResult(Enum):
    """What happens to a pane: ``(fire, purge)``."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return bool(self.value[0])

    def is_purge(self) -> bool:
        return bool(self.value[1])


class Trigger(ABC):
    """Decides when a pane fires. ``ctx`` (a ``Trigger.TriggerContext``) has
    ``get_current_watermark()``, ``get_current_processing_time()``,
    ``register_event_time_timer(t)``, ``register_processing_time_timer(t)``, their
    ``delete_*`` twins and ``get_partitioned_state(descriptor)``; in :meth:`on_merge` also
    ``merge_partitioned_state(descriptor)``."""

    @abstractmethod
    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult: ...

    def can_merge(self) -> bool:
        """Whether the trigger supports merging windows (sessions); then :meth:`on_merge` is needed."""
        return False

    def on_merge(self, window: Any, ctx: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    @abstractmethod
    def clear(self, window: Any, ctx: Any) -> None:
        """Drops the timers and state the trigger holds for ``window``."""


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (the event-time windows' default)."""

    @staticmethod
    def create() -> EventTimeTrigger:
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # a late element within the allowed lateness
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())

    def __repr__(self) -> str:
        return "EventTimeTrigger()"


class ProcessingTimeTrigger(Trigger):
    """Fires once the processing time passes the window's end."""

    @staticmethod
    def create() -> ProcessingTimeTrigger:
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())

    def __repr__(self) -> str:
        return "ProcessingTimeTrigger()"


def _add(a: int, b: int) -> int:
    return a + b


def _min(a: int, b: int) -> int:
    return min(a, b)


class CountTrigger(Trigger):
    """Fires when the pane holds ``count`` elements (and then counts again from 0)."""

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"must be a positive number of elements, got {count!r}", key="CountTrigger.of(count)")
        self.count = count
        self.state_desc = ReducingStateDescriptor("count", _add)

    @staticmethod
    def of(count: int) -> CountTrigger:
        return CountTrigger(count)

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        state.add(1)
        if state.get() >= self.count:
            state.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.get_partitioned_state(self.state_desc).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger):
    """Makes ``nested`` purge the pane whenever it fires."""

    def __init__(self, nested_trigger: Trigger) -> None:
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> PurgingTrigger:
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window: Any, ctx: Any) -> None:
        self.nested_trigger.on_merge(window, ctx)

    def clear(self, window: Any, ctx: Any) -> None:
        self.nested_trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class ContinuousEventTimeTrigger(Trigger):
    """Fires every ``interval`` of event time within the window, and at its end."""

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise ConfigError(f"must be at least 1 ms, got {interval} ms", key="ContinuousEventTimeTrigger.of(interval)")
        self.interval = interval
        self.state_desc = ReducingStateDescriptor("fire-time", _min)

    @staticmethod
    def of(interval: Any) -> ContinuousEventTimeTrigger:
        return ContinuousEventTimeTrigger(to_millis(interval, what="ContinuousEventTimeTrigger.of(interval)"))

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() is None:
            self._next_fire(timestamp - timestamp % self.interval, window, ctx, state)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._next_fire(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def _next_fire(self, time: int, window: Any, ctx: Any, state: Any) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        state.add(next_fire)
        ctx.register_event_time_timer(next_fire)

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            ctx.register_event_time_timer(next_fire)

    def clear(self, window: Any, ctx: Any) -> None:
        state = ctx.get_partitioned_state(self.state_desc)
        if (fire := state.get()) is not None:
            ctx.delete_event_time_timer(fire)
            state.clear()

    def __repr__(self) -> str:
        return f"ContinuousEventTimeTrigger({self.interval})"


class NeverTrigger(Trigger):
    """Never fires: the default of :class:`GlobalWindows`."""

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        pass

    def clear(self, window: Any, ctx: Any) -> None:
        pass


__all__ = [
    "ContinuousEventTimeTrigger", "CountTrigger", "EventTimeTrigger", "NeverTrigger",
    "ProcessingTimeTrigger", "PurgingTrigger", "Trigger", "TriggerResult",
]
