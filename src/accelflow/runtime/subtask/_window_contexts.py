"""The contexts a window operator hands to user code: the trigger's (timers and partitioned
state of the current key and window), the window function's (``window()``,
``window_state()``...) and the assigner's. They read the engine's current key and window.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import KeyedStateStore, MergingWindowAssigner, ValueStateDescriptor

if TYPE_CHECKING:
    from accelflow.runtime.subtask._window_engine import WindowEngine

#: a count window assigner's per-key element counter (PyFlink keeps the same)
COUNTER = ValueStateDescriptor("count-window-counter")


class TriggerContext:
    """Flink's ``WindowOperator.Context``: what a trigger may do for (key, window)."""

    def __init__(self, engine: WindowEngine) -> None:
        self._engine = engine
        self.window: Any = None
        self.merged_windows: list[Any] = []

    def get_current_watermark(self) -> int:
        return self._engine.timers.current_watermark()

    def get_current_processing_time(self) -> int:
        return self._engine.timers.current_processing_time()

    def register_event_time_timer(self, time: int) -> None:
        self._engine.timers.register_event_time_timer(self._engine.current_key, self.window, time)

    def register_processing_time_timer(self, time: int) -> None:
        self._engine.timers.register_processing_time_timer(self._engine.current_key, self.window, time)

    def delete_event_time_timer(self, time: int) -> None:
        self._engine.timers.delete_event_time_timer(self._engine.current_key, self.window, time)

    def delete_processing_time_timer(self, time: int) -> None:
        self._engine.timers.delete_processing_time_timer(self._engine.current_key, self.window, time)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        state = self._engine.state_of(state_descriptor)
        state.set_current_namespace(self.window)
        return state

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        if self.merged_windows:
            state = self._engine.state_of(state_descriptor)
            if not hasattr(state, "merge_namespaces"):
                raise JobError(f"operator {self._engine.name!r}: state {state_descriptor.name!r} does not "
                               "refer to a mergeable state (list, reducing or aggregating)")
            state.merge_namespaces(self.window, self.merged_windows)

    def get_metric_group(self) -> None:
        return None

    def on_element(self, value: Any, timestamp: int) -> Any:
        return self._engine.trigger.on_element(value, timestamp, self.window, self)

    def on_event_time(self, time: int) -> Any:
        return self._engine.trigger.on_event_time(time, self.window, self)

    def on_processing_time(self, time: int) -> Any:
        return self._engine.trigger.on_processing_time(time, self.window, self)

    def on_merge(self, merged_windows: list[Any]) -> None:
        self.merged_windows = merged_windows
        self._engine.trigger.on_merge(self.window, self)

    def clear(self) -> None:
        self._engine.trigger.clear(self.window, self)


class _PerWindowState(KeyedStateStore):
    """``context.window_state()``: keyed state scoped to the key and the window."""

    def __init__(self, engine: WindowEngine, window: Any) -> None:
        self._engine = engine
        self._window = window

    def _scoped(self, descriptor: Any, kind: str) -> Any:
        if isinstance(self._engine.assigner, MergingWindowAssigner):
            raise JobError(f"operator {self._engine.name!r}: Per-window state is not allowed when using merging windows.")
        state = self._engine.state_of(descriptor, kind)
        state.set_current_namespace(self._window)
        return state

    def get_state(self, state_descriptor: Any) -> Any:
        return self._scoped(state_descriptor, "value")

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._scoped(state_descriptor, "list")

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._scoped(state_descriptor, "map")

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._scoped(state_descriptor, "reducing")

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._scoped(state_descriptor, "aggregating")


class WindowFunctionContext:
    """``ProcessWindowFunction.Context`` for the window being evaluated or cleared."""

    def __init__(self, engine: WindowEngine) -> None:
        self._engine = engine
        self._window: Any = None
        self._outputs: Any = None

    def bind(self, window: Any, outputs: Any) -> WindowFunctionContext:
        self._window, self._outputs = window, outputs
        return self

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return self._engine.timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._engine.timers.current_watermark()

    def window_state(self) -> KeyedStateStore:
        return _PerWindowState(self._engine, self._window)

    def global_state(self) -> KeyedStateStore:
        return self._engine.context

    def output(self, output_tag: Any, value: Any) -> None:
        self._outputs.emit_side(output_tag, value, self._window.max_timestamp())


class AssignerContext:
    """``WindowAssigner.WindowAssignerContext``; count assigners also number elements."""

    def __init__(self, engine: WindowEngine) -> None:
        self._engine = engine

    def get_current_processing_time(self) -> int:
        return self._engine.timers.current_processing_time()

    def get_runtime_context(self) -> Any:
        return self._engine.context

    def next_element_number(self) -> int:
        """The index of this element among its key's (0, 1, 2...), kept in keyed state."""
        counter = self._engine.state_of(COUNTER)
        counter.set_current_namespace(None)
        n = counter.value() or 0
        counter.update(n + 1)
        return int(n)


def call_window_function(fn: Any, key: Any, window: Any, ctx: WindowFunctionContext,
                         elements: list[Any], all_window: bool) -> Iterable[Any] | None:
    """Calls a ``ProcessWindowFunction`` / ``WindowFunction`` (or their all-window twins)."""
    if hasattr(fn, "process"):
        return fn.process(ctx, elements) if all_window else fn.process(key, ctx, elements)  # type: ignore[no-any-return]
    if hasattr(fn, "apply"):
        return fn.apply(window, elements) if all_window else fn.apply(key, window, elements)  # type: ignore[no-any-return]
    return fn(key, window, elements)  # type: ignore[no-any-return]


__all__ = ["COUNTER", "AssignerContext", "TriggerContext", "WindowFunctionContext", "call_window_function"]
