"""The window operator (Flink's ``WindowOperator``), pure: elements go to the windows their
assigner picks, the window contents grow incrementally (reduce, aggregate) or as a list
(process/apply), the trigger decides when a pane fires and whether it is purged, and a
cleanup timer drops each window ``allowed_lateness`` after its end. Elements of windows
already dropped are late: sent to the late-data side output, or counted and dropped.

Results carry the window's ``max_timestamp()`` as their timestamp, as in Flink.

Example (a tumbling 5 s sum, fired by the watermark):
    >>> from accelflow.dataflow.eventtime import TumblingEventTimeWindows, Time
    >>> engine = WindowEngine("sum", TumblingEventTimeWindows.of(Time.seconds(5)),
    ...                       reduce_function=lambda a, b: (a[0], a[1] + b[1]))
    >>> _ = engine.process_element(("a", 1), 1000, key="a")
    >>> _ = engine.process_element(("a", 2), 4000, key="a")
    >>> engine.advance_watermark(4999).records
    [(('a', 3), 4999)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow.eventtime import (
    MAX_TIMESTAMP, MIN_TIMESTAMP, AggregatingStateDescriptor, EventTimeTrigger, ListStateDescriptor, MapStateDescriptor,
    MergingWindowAssigner, OutputTag, ReducingStateDescriptor, TriggerResult, WindowAssigner, at_least, to_millis)
from accelflow.runtime.subtask._calls import function_object
from accelflow.runtime.subtask._engine_base import KeyedEngine, Outputs
from accelflow.runtime.subtask._merging_windows import MergingWindowSet
from accelflow.runtime.subtask._timers import InternalTimer
from accelflow.runtime.subtask._window_chunks import add_chunk, chunk_applies
from accelflow.runtime.subtask._window_contexts import (
    AssignerContext, TriggerContext, WindowFunctionContext, call_window_function)

#: the merging assigners' window -> state window mapping, per key
MERGING_WINDOW_SET = MapStateDescriptor("merging-window-set")


#: the trigger results that fire, and those that purge (``is_fire()`` and ``is_purge()``
#: without reading the enum's value: the engine asks at every element and timer)
_FIRES = (TriggerResult.FIRE, TriggerResult.FIRE_AND_PURGE)
_PURGES = (TriggerResult.PURGE, TriggerResult.FIRE_AND_PURGE)


class WindowEngine(KeyedEngine):
    """One keyed window operator (``key_by(...).window(...).reduce/aggregate/process/apply``).

    Args:
        name: the operator's name (errors name it).
        assigner: a ``WindowAssigner``.
        trigger: the trigger; default: the assigner's.
        reduce_function: incremental reduce (a ``ReduceFunction`` or ``fn(a, b)``).
        aggregate_function: incremental ``AggregateFunction``.
        window_function: a ``ProcessWindowFunction`` / ``WindowFunction`` (or all-window
            twin); alone it sees every element of the pane, after a reduce or aggregate it
            sees the one result.
        allowed_lateness: how long after its end a window keeps its state (late firings).
        late_data_output_tag: where elements too late for any window go (else dropped).
        all_window: ``window_all``: functions get no key.
    """

    def __init__(self, name: str, assigner: WindowAssigner, *, trigger: Any = None,
                 reduce_function: Any = None, aggregate_function: Any = None, window_function: Any = None,
                 allowed_lateness: Any = 0, late_data_output_tag: OutputTag | None = None,
                 all_window: bool = False, **engine: Any) -> None:
        super().__init__(name, keyed=True, **engine)
        where = f"operator {name!r}"
        if not isinstance(assigner, WindowAssigner):
            raise ConfigError(f"window(...) needs a WindowAssigner, got {type(assigner).__name__}", key=where)
        what = f"allowed_lateness of operator {name!r}"
        self.lateness = at_least(to_millis(allowed_lateness, what=what), 0, what=what, shown=allowed_lateness)
        if (reduce_function is not None) + (aggregate_function is not None) > 1 or \
                (reduce_function is None and aggregate_function is None and window_function is None):
            raise ConfigError("needs one of reduce, aggregate, process or apply", key=where)
        self.assigner = assigner
        self.event_time = assigner.is_event_time()
        self.merging = isinstance(assigner, MergingWindowAssigner)
        self.trigger = trigger if trigger is not None else assigner.get_default_trigger()
        if self.merging and not self.trigger.can_merge():
            raise ConfigError(f"A merging window assigner cannot be used with a trigger that does not "
                              f"support merging ({type(self.trigger).__name__})", key=where)
        self.late_tag = late_data_output_tag
        self.all_window = all_window
        self.reduce_function = function_object(reduce_function, "reduce")
        self.aggregate_function = function_object(aggregate_function, "create_accumulator", "add", "get_result")
        self.window_function = function_object(window_function, "process", "apply")
        clear = getattr(self.window_function, "clear", None)
        self.clear_function = clear if callable(clear) else None
        #: the default event-time trigger (its timers' results are known without calling it)
        self.plain_trigger = type(self.trigger) is EventTimeTrigger and not self.merging
        self.functions = [f for f in (self.reduce_function, self.aggregate_function, self.window_function)
                          if f is not None]
        self.contents = self.state_of(self._contents_descriptor())
        self.listing = self.contents.kind == "list"
        self.trigger_ctx = TriggerContext(self)
        self.function_ctx = WindowFunctionContext(self)
        self.assigner_ctx = AssignerContext(self)
        self.num_late_records_dropped = 0
        #: the windows of chunks by their start (tumbling), one object per window, so that state
        #: and timers find them by identity (see ``_window_chunks``)
        self.window_cache: dict[int, Any] = {}
        self._window_cache_limit = 1024

    def _contents_descriptor(self) -> Any:
        if self.reduce_function is not None:
            return ReducingStateDescriptor("window-contents", self.reduce_function)
        if self.aggregate_function is not None:
            return AggregatingStateDescriptor("window-contents", self.aggregate_function)
        return ListStateDescriptor("window-contents")

    def state_of(self, descriptor: Any, kind: str | None = None) -> Any:
        assert self.backend is not None
        return self.backend.get_state(descriptor, kind)

    def open(self) -> None:
        """Opens the user functions (``open(runtime_context)``) before the first element."""
        for fn in self.functions:
            if callable(getattr(fn, "open", None)):
                fn.open(self.context)

    def close(self) -> None:
        for fn in self.functions:
            if callable(getattr(fn, "close", None)):
                fn.close()

    # -- elements -------------------------------------------------------------------------------

    def process_element(self, value: Any, timestamp: int | None, key: Any = None) -> Outputs:
        """Adds ``value`` (event time ``timestamp``) of ``key`` to its windows."""
        out = Outputs()
        self.set_current_key(key)
        windows = self.assigner.assign_windows(value, timestamp, self.assigner_ctx)  # type: ignore[arg-type]
        skipped = True
        if self.merging:
            window_set = self._window_set()
            for window in windows:
                actual = window_set.add_window(window, self._merge_function)
                if self._is_window_late(actual):
                    window_set.retire_window(actual)
                    continue
                skipped = False
                self._add(value, timestamp, actual, window_set.get_state_window(actual), out)
            self._persist(window_set)
        else:
            for window in windows:
                if self._is_window_late(window):
                    continue
                skipped = False
                self._add(value, timestamp, window, window, out)
        if skipped and self._is_element_late(timestamp):
            if self.late_tag is not None:
                out.emit_side(self.late_tag, value, timestamp)
            else:
                self.num_late_records_dropped += 1
        assert self.backend is not None
        self.backend.on_record()
        return out

    def process_chunk(self, values: Sequence[Any], timestamps: Sequence[int | None] | np.ndarray[Any, Any],
                      keys: Sequence[Any]) -> Outputs:
        """:meth:`process_element` of each element of a chunk in turn (the same outputs, state
        and timers), at once where that is exact (``_window_chunks``): then each (key, window)
        is folded once and its timers registered once."""
        stamps = timestamps if isinstance(timestamps, np.ndarray) else \
            np.fromiter((MIN_TIMESTAMP if t is None else t for t in timestamps), np.int64, len(timestamps))
        if chunk_applies(self):
            out = add_chunk(self, values, stamps, keys)
            if len(self.window_cache) > self._window_cache_limit:
                self._prune_window_cache()
            if out is not None:
                return out
        out = Outputs()
        for value, timestamp, key in zip(values, stamps.tolist(), keys):
            out.extend(self.process_element(value, None if timestamp == MIN_TIMESTAMP else timestamp, key=key))
        return out

    def _prune_window_cache(self) -> None:
        """Forgets the windows of :attr:`window_cache` that no element can join any more."""
        self.window_cache = {s: w for s, w in self.window_cache.items() if not self._is_window_late(w)}
        self._window_cache_limit = max(1024, 2 * len(self.window_cache))

    def _add(self, value: Any, timestamp: Any, window: Any, state_window: Any, out: Outputs) -> None:
        self.contents.set_current_namespace(state_window)
        self.contents.add(value)
        self.trigger_ctx.window = window
        result = self.trigger_ctx.on_element(value, timestamp)
        if result in _FIRES:
            contents = self._contents(state_window)
            if contents is None:
                return
            self._emit(window, contents, out)
        if result in _PURGES:
            self._contents_cleared(state_window)
        self._cleanup_timer(window, register=True)

    # -- timers ---------------------------------------------------------------------------------

    def advance_watermark(self, watermark: int) -> Outputs:
        """Fires the windows whose time came (timer keys are canonical already: set as they are)."""
        out = Outputs()
        backend = self.backend
        assert backend is not None
        for timer in self.timers.advance_watermark(watermark):
            self.current_key = backend.current_key = timer.key
            self._on_timer(timer, out, event_time=True)
        return out

    def on_event_time(self, timer: InternalTimer, out: Outputs) -> None:
        self._on_timer(timer, out, event_time=True)

    def on_processing_time(self, timer: InternalTimer, out: Outputs) -> None:
        self._on_timer(timer, out, event_time=False)

    def _on_timer(self, timer: InternalTimer, out: Outputs, event_time: bool) -> None:
        window = timer.namespace
        self.trigger_ctx.window = window
        window_set = self._window_set() if self.merging else None
        state_window = window_set.get_state_window(window) if window_set is not None else window
        if state_window is None:
            return  # a timer of a window merged away whose trigger left it behind
        ctx = self.trigger_ctx
        plain = event_time and self.plain_trigger
        if plain:  # EventTimeTrigger.on_event_time without the calls
            result = TriggerResult.FIRE if timer.timestamp == window.max_timestamp() else TriggerResult.CONTINUE
        else:
            result = ctx.on_event_time(timer.timestamp) if event_time else ctx.on_processing_time(timer.timestamp)
        if result in _FIRES and (contents := self._contents(state_window)) is not None:
            self._emit(window, contents, out)
        if result in _PURGES:
            self._contents_cleared(state_window)
        if self.event_time == event_time and timer.timestamp == self._cleanup_time(window):
            # the trigger's own timer is the one firing (lateness 0): clearing it is a no-op
            fired = plain and timer.timestamp == window.max_timestamp()
            self._clear_all_state(window, state_window, window_set, out, trigger_timer_fired=fired)
        if window_set is not None:
            self._persist(window_set)

    def _clear_all_state(self, window: Any, state_window: Any, window_set: MergingWindowSet | None, out: Outputs,
                         trigger_timer_fired: bool = False) -> None:
        self._contents_cleared(state_window)
        if not trigger_timer_fired:  # else EventTimeTrigger.clear would delete the timer that just fired
            self.trigger_ctx.window = window
            self.trigger_ctx.clear()
        if self.clear_function is not None:
            self.clear_function(self.function_ctx.bind(window, out))
        if window_set is not None:
            window_set.retire_window(window)

    # -- helpers --------------------------------------------------------------------------------

    def _contents(self, state_window: Any) -> Any:
        self.contents.set_current_namespace(state_window)
        contents = self.contents.get()
        return (contents or None) if self.listing else contents

    def _contents_cleared(self, state_window: Any) -> None:
        self.contents.set_current_namespace(state_window)
        self.contents.clear()

    def _emit(self, window: Any, contents: Any, out: Outputs) -> None:
        at = window.max_timestamp()
        elements = contents if self.listing else [contents]
        if self.window_function is None:
            for value in elements:
                out.emit(value, at)
            return
        ctx = self.function_ctx.bind(window, out)
        out.collect(call_window_function(self.window_function, self.current_key, window, ctx, elements,
                                         self.all_window), at)

    def _cleanup_time(self, window: Any) -> int:
        if not self.event_time:
            return int(window.max_timestamp())
        return min(int(window.max_timestamp()) + self.lateness, MAX_TIMESTAMP)  # no wrap-around

    def _cleanup_timer(self, window: Any, register: bool) -> None:
        time = self._cleanup_time(window)
        if time == MAX_TIMESTAMP:
            return  # a window that never ends (global, count) is never cleaned up
        timers, key = self.timers, self.current_key
        if self.event_time:
            (timers.register_event_time_timer if register else timers.delete_event_time_timer)(key, window, time)
        else:
            (timers.register_processing_time_timer if register else timers.delete_processing_time_timer)(key, window, time)

    def _is_window_late(self, window: Any) -> bool:
        return self.event_time and self._cleanup_time(window) <= self.timers.current_watermark()

    def _is_element_late(self, timestamp: Any) -> bool:
        return self.event_time and timestamp + self.lateness <= self.timers.current_watermark()

    def _window_set(self) -> MergingWindowSet:
        state = self.state_of(MERGING_WINDOW_SET)
        state.set_current_namespace(None)
        return MergingWindowSet(self.assigner, dict(state.items()))

    def _persist(self, window_set: MergingWindowSet) -> None:
        if window_set.changed():
            state = self.state_of(MERGING_WINDOW_SET)
            state.set_current_namespace(None)
            state.clear()
            state.put_all(window_set.mapping)

    def _merge_function(self, result: Any, merged: list[Any], state_window: Any, merged_state: list[Any]) -> None:
        if self.event_time and result.max_timestamp() + self.lateness <= self.timers.current_watermark():
            raise JobError(f"operator {self.name!r}: The end timestamp of an event-time window cannot become "
                           f"earlier than the current watermark by merging. Current watermark: "
                           f"{self.timers.current_watermark()} window: {result}")
        if not self.event_time and result.max_timestamp() <= self.timers.current_processing_time():
            raise JobError(f"operator {self.name!r}: The end timestamp of a processing-time window cannot become "
                           f"earlier than the current processing time by merging. Current processing time: "
                           f"{self.timers.current_processing_time()} window: {result}")
        self.trigger_ctx.window = result
        self.trigger_ctx.on_merge(merged)
        for window in merged:
            self.trigger_ctx.window = window
            self.trigger_ctx.clear()
            self._cleanup_timer(window, register=False)
        self.contents.merge_namespaces(state_window, merged_state)


__all__ = ["MERGING_WINDOW_SET", "WindowEngine"]
