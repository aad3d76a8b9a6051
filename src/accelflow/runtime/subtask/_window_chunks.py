"""A chunk of elements into a window operator at once, with the result of adding them one by
one (:meth:`WindowEngine.process_element`), where that is exact.

Within one chunk the watermark and the processing time stand still (they move between
chunks), so with a trigger whose ``on_element`` only registers a timer (``EventTimeTrigger``
on a window not yet due, ``ProcessingTimeTrigger``) no pane fires and nothing but the
contents, the timers and the late elements changes. The chunk's elements are then grouped by
(key, window) in the order they first appear, each group is folded into its window's contents
at once (a reduce or an aggregate sees its values in element order; a list gets them
appended) and its timers are registered once, in that same order, so timers of equal time
still fire in the order one by one would have registered them. Late elements go to the
late-data side output (or the dropped count) in order.

Anything else falls back to one element at a time: merging windows (sessions), other
triggers (count, continuous, purging, custom), assigners other than the built-in tumbling
and sliding ones (a count assigner numbers elements in state), a window that a late element
would fire within the allowed lateness, a record without a timestamp (for its error), and
state with TTL cleaned up on every record.

Example (two elements of one key and window: one fold, one timer):
    >>> from accelflow.dataflow.eventtime import TumblingEventTimeWindows
    >>> from accelflow.runtime.subtask._window_engine import WindowEngine
    >>> engine = WindowEngine("sum", TumblingEventTimeWindows.of(1000), reduce_function=lambda a, b: a + b)
    >>> _ = engine.process_chunk([1, 2, 5], [10, 20, 1500], ["a", "a", "b"])
    >>> engine.timers.num_event_time_timers(), engine.advance_watermark(999).records
    (2, [(3, 999)])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from accelflow.dataflow.eventtime import (
    MAX_TIMESTAMP, MIN_TIMESTAMP, EventTimeTrigger, ProcessingTimeTrigger, SlidingEventTimeWindows, TumblingEventTimeWindows)
from accelflow.runtime.subtask._engine_base import Outputs
from accelflow.runtime.subtask._keys import canonical_key
from accelflow.runtime.subtask._timers import InternalTimer

if TYPE_CHECKING:
    from accelflow.runtime.subtask._window_engine import WindowEngine

#: assigners whose ``assign_windows`` reads nothing but the element's time (the built-ins'
#: own method, not a subclass's override)
_PLAIN_ASSIGN = (TumblingEventTimeWindows.assign_windows, SlidingEventTimeWindows.assign_windows)
#: triggers whose ``on_element`` registers one timer at the window's end and fires at most a
#: window already due (then the chunk goes one element at a time)
_PLAIN_TRIGGERS = (EventTimeTrigger, ProcessingTimeTrigger)


def chunk_applies(engine: WindowEngine) -> bool:
    """Whether chunks of ``engine`` may be added at once (see the module)."""
    if engine.merging or type(engine.assigner).assign_windows not in _PLAIN_ASSIGN \
            or type(engine.trigger) not in _PLAIN_TRIGGERS:
        return False
    assert engine.backend is not None
    return not any(state.ttl is not None and state.ttl.config.run_cleanup_for_every_record
                   for state in engine.backend.states.values())


def _canonical_keys(keys: Sequence[Any]) -> list[Any]:
    return [k if type(k) is int or type(k) is str else canonical_key(k) for k in keys]


#: ``(groups, late, windows)`` of a chunk, see :func:`group_chunk`
Grouped = tuple[dict[tuple[Any, Any], list[Any]], list[int], dict[Any, Any]]


def group_chunk(engine: WindowEngine, values: Sequence[Any], timestamps: np.ndarray[Any, Any],
                keys: Sequence[Any]) -> Grouped | None:
    """``(groups, late, windows)``: the values of each ``(key, window id)`` in order of first
    appearance, the indices of the elements no window took, and the window of each id;
    ``None`` when the chunk must go one element at a time. Nothing is changed yet."""
    event_time = engine.assigner.is_event_time()
    if event_time and len(timestamps) and timestamps.min() <= MIN_TIMESTAMP:
        return None  # a record without a timestamp: one at a time raises the error naming it
    fires_due = type(engine.trigger) is EventTimeTrigger
    watermark = engine.timers.current_watermark()
    int_keys = _int_keys(keys)  # ints are canonical keys already
    keys = keys if int_keys is not None else _canonical_keys(keys)
    groups: dict[tuple[Any, Any], list[Any]] = {}
    late: list[int] = []
    windows = engine.window_cache
    starts = engine.assigner.windows_of(timestamps, windows) if hasattr(engine.assigner, "windows_of") else None
    if starts is not None:  # tumbling: one window per element, by its start
        dropped = set()
        for start in np.unique(starts).tolist():
            window = windows[start]
            if engine._is_window_late(window):
                dropped.add(start)
            elif fires_due and window.max_timestamp() <= watermark:
                return None  # a late firing within the allowed lateness: one at a time
        if int_keys is not None:
            return (*_sorted_groups(values, int_keys, starts, dropped), windows)
        for i, (value, key, start) in enumerate(zip(values, keys, starts.tolist())):
            group = groups.get((key, start))
            if group is not None:
                group.append(value)
            elif start in dropped:
                late.append(i)
            else:
                groups[(key, start)] = [value]
        return groups, late, windows
    windows = {}
    context = engine.assigner_ctx
    for i, (value, key, timestamp) in enumerate(zip(values, keys, timestamps.tolist())):
        skipped = True
        for window in engine.assigner.assign_windows(value, timestamp, context):
            if engine._is_window_late(window):
                continue
            if fires_due and window.max_timestamp() <= watermark:
                return None
            skipped = False
            window = windows.setdefault(window, window)
            groups.setdefault((key, window), []).append(value)
        if skipped:
            late.append(i)
    return groups, late, windows


def _int_keys(keys: Sequence[Any]) -> np.ndarray[Any, Any] | None:
    """The keys as int64 where every one is an int that fits (not a bool), else ``None``."""
    if not all(type(k) is int for k in keys):
        return None
    try:
        return np.fromiter(keys, np.int64, len(keys))
    except OverflowError:
        return None


def _sorted_groups(values: Sequence[Any], keys: np.ndarray[Any, Any], starts: np.ndarray[Any, Any],
                   dropped: set[int]) -> tuple[dict[tuple[Any, Any], list[Any]], list[int]]:
    """:func:`group_chunk`'s groups and late elements of int keys and tumbling windows, by
    sorting: a stable sort on (key, start) keeps each group's elements in order, and the
    groups are then taken in the order of their first elements."""
    order = np.lexsort((starts, keys))  # stable
    sorted_keys, sorted_starts = keys[order], starts[order]
    cuts = np.flatnonzero((sorted_keys[1:] != sorted_keys[:-1]) | (sorted_starts[1:] != sorted_starts[:-1])) + 1
    firsts = np.concatenate(([0], cuts)).astype(np.intp)
    bounds = [*firsts.tolist(), len(values)]
    positions = order.tolist()
    in_order = [values[i] for i in positions]
    group_keys, group_starts = sorted_keys[firsts].tolist(), sorted_starts[firsts].tolist()
    groups: dict[tuple[Any, Any], list[Any]] = {}
    late: list[int] = []
    for g in np.argsort(order[firsts], kind="stable").tolist():
        start, a, b = group_starts[g], bounds[g], bounds[g + 1]
        if start in dropped:
            late += positions[a:b]
        else:
            groups[(group_keys[g], start)] = in_order[a:b]
    late.sort()
    return groups, late


def add_chunk(engine: WindowEngine, values: Sequence[Any], timestamps: np.ndarray[Any, Any],
              keys: Sequence[Any]) -> Outputs | None:
    """Adds a chunk to ``engine`` as :meth:`WindowEngine.process_element` would one by one,
    or returns ``None`` (and changes nothing) where it must go one at a time."""
    grouped = group_chunk(engine, values, timestamps, keys)
    if grouped is None:
        return None
    groups, late, windows = grouped
    contents, timers, backend = engine.contents, engine.timers, engine.backend
    assert backend is not None
    trigger_queue = timers.event if type(engine.trigger) is EventTimeTrigger else timers.processing
    cleanup_queue = timers.event if engine.assigner.is_event_time() else timers.processing
    trigger_live, cleanup_live = trigger_queue.live, cleanup_queue.live
    times: dict[Any, tuple[int, int | None]] = {}  # window id -> (trigger time, cleanup time or None)
    for window_id in {window_id for _, window_id in groups}:
        window = windows[window_id]
        end, cleanup_at = window.max_timestamp(), engine._cleanup_time(window)
        same = cleanup_at == MAX_TIMESTAMP or (cleanup_at == end and cleanup_queue is trigger_queue)
        times[window_id] = (end, None if same else cleanup_at)  # None: no cleanup timer of its own
    for (key, window_id), group in groups.items():
        window = windows[window_id]
        backend.current_key = key
        contents.namespace = window
        contents.add_all(group)
        end, cleanup = times[window_id]
        timer = InternalTimer(end, key, window)
        if timer not in trigger_live:  # what the trigger's on_element registers
            trigger_queue.add(timer)
        if cleanup is not None:
            timer = InternalTimer(cleanup, key, window)
            if timer not in cleanup_live:
                cleanup_queue.add(timer)
    if len(keys):
        engine.set_current_key(keys[-1])  # as after the last element one at a time
    out = Outputs()
    for i in late:
        timestamp = int(timestamps[i])
        if engine._is_element_late(timestamp):
            if engine.late_tag is not None:
                out.emit_side(engine.late_tag, values[i], timestamp)
            else:
                engine.num_late_records_dropped += 1
    return out


__all__ = ["add_chunk", "chunk_applies", "group_chunk"]
