"""Windows and window assigners, with PyFlink's names and Flink's semantics: a window's
``max_timestamp()`` is the last millisecond it covers; event-time windows fire when the
watermark reaches it.

Example:
    >>> from datetime import timedelta
    >>> TumblingEventTimeWindows.of(timedelta(seconds=5)).assign_windows("x", 7300, None)
    [TimeWindow(start=5000, end=10000)]
    >>> TimeWindow.get_window_start_with_offset(7300, 0, 5000)
    5000
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from accelflow._errors import ConfigError
from accelflow.dataflow._time import MAX_TIMESTAMP, MIN_TIMESTAMP, at_least, to_millis
from accelflow.dataflow._triggers import (
    CountTrigger, EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger)


class Window(ABC):
    """A finite bucket of a keyed stream."""

    @abstractmethod
    def max_timestamp(self) -> int:
        """The largest timestamp that still belongs to the window."""


class TimeWindow(Window):
    """The interval ``[start, end)`` in epoch milliseconds."""

    __slots__ = ("start", "end", "_hash")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self._hash = hash((start, end))  # windows key state and timers: hashed very often

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Whether the two windows overlap or touch (sessions that touch merge)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """The start of the window of ``window_size`` shifted by ``offset`` holding ``timestamp``."""
        return timestamp - (timestamp - offset + window_size) % window_size

    @staticmethod
    def merge_windows(windows: Iterable[TimeWindow], callback: Callable[[list[TimeWindow], TimeWindow], None]) -> None:
        """Calls ``callback(merged, result)`` for each group of overlapping windows (sorted)."""
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for window in sorted(windows, key=lambda w: (w.start, w.end)):
            if groups and groups[-1][0].intersects(window):
                groups[-1] = (groups[-1][0].cover(window), groups[-1][1] + [window])
            else:
                groups.append((window, [window]))
        for result, merged in groups:
            if len(merged) > 1:
                callback(merged, result)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimeWindow) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: TimeWindow) -> bool:
        return (self.start, self.end) < (other.start, other.end)

    def __reduce__(self) -> tuple[Any, ...]:
        return TimeWindow, (self.start, self.end)

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class GlobalWindow(Window):
    """The one window of :class:`GlobalWindows`; it never ends."""

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    @staticmethod
    def get() -> GlobalWindow:
        return GlobalWindow()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalWindow)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "GlobalWindow"


class CountWindow(Window):
    """PyFlink's count window number ``id`` (count windows of a key are numbered)."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:  # noqa: A002 (PyFlink's name)
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CountWindow) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("count", self.id))

    def __reduce__(self) -> tuple[Any, ...]:
        return CountWindow, (self.id,)

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


class WindowAssigner(ABC):
    """Assigns each element to zero or more windows (PyFlink's ``WindowAssigner``)."""

    @abstractmethod
    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        """The windows of ``element``; ``context`` has ``get_current_processing_time()`` and
        ``get_runtime_context()``."""

    @abstractmethod
    def get_default_trigger(self, env: Any = None) -> Trigger:
        """The trigger used when ``.trigger(...)`` is not given."""

    @abstractmethod
    def is_event_time(self) -> bool:
        """Whether windows follow event time (watermarks) rather than processing time."""


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows may merge (sessions)."""

    @abstractmethod
    def merge_windows(self, windows: Iterable[Any], callback: Callable[[list[Any], Any], None]) -> None:
        """Calls ``callback(to_be_merged, merge_result)`` for each group that merges."""


def _needs_timestamp(timestamp: int, assigner: WindowAssigner) -> None:
    if timestamp is None or timestamp <= MIN_TIMESTAMP:
        raise ConfigError(
            "a record has no timestamp: call assign_timestamps_and_watermarks(...) before an "
            "event-time window, or use a processing-time one", key=type(assigner).__name__)


#: timestamps whose window arithmetic stays inside int64 (else windows are computed in Python)
_VECTOR_MIN, _VECTOR_MAX = -(2**62), 2**62


def _sliding_starts(timestamp: int, size: int, slide: int, offset: int) -> list[TimeWindow]:
    last_start = TimeWindow.get_window_start_with_offset(timestamp, offset, slide)
    return [TimeWindow(s, s + size) for s in range(last_start, timestamp - size, -slide)]


class _TimeDomain:
    """An assigner of the event-time family (``_event_time = True``) or its processing-time
    twin (a subclass sets ``False``): the default trigger and ``is_event_time`` follow it."""

    _event_time = True

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger() if self._event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self._event_time


class _Tumbling(_TimeDomain, WindowAssigner):

    def __init__(self, size: int, offset: int = 0) -> None:
        name = type(self).__name__
        self._size = at_least(size, 1, what=f"{name}.of(size)", shown=size)
        if abs(offset) >= size:
            raise ConfigError(f"parameters must satisfy abs(offset) < size, got offset {offset} ms "
                              f"and size {size} ms", key=f"{name}.of(offset)")
        self._offset = offset

    @classmethod
    def of(cls, size: Any, offset: Any = None) -> Any:
        name = cls.__name__
        return cls(to_millis(size, what=f"{name}.of(size)"),
                   0 if offset is None else to_millis(offset, what=f"{name}.of(offset)"))

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        if self._event_time:
            _needs_timestamp(timestamp, self)
        else:
            timestamp = context.get_current_processing_time()
        start = TimeWindow.get_window_start_with_offset(timestamp, self._offset, self._size)
        return [TimeWindow(start, start + self._size)]

    def windows_of(self, timestamps: np.ndarray[Any, Any], known: dict[int, TimeWindow]) -> np.ndarray[Any, Any] | None:
        """The windows of a chunk's event ``timestamps`` (int64) at once: the start of each
        one's window (int64), with the window of each new start added to ``known`` (start -> window;
        a start already there keeps its window object); ``None`` where :meth:`assign_windows`
        must be called per element (processing time, or timestamps so large that int64 would
        wrap).

        Example:
            >>> known = {}
            >>> TumblingEventTimeWindows.of(1000).windows_of(np.array([5, 1999, 1000]), known).tolist(), known[1000]
            ([0, 1000, 1000], TimeWindow(start=1000, end=2000))
        """
        if not self._event_time or not len(timestamps) or \
                timestamps.min() <= _VECTOR_MIN or timestamps.max() >= _VECTOR_MAX:
            return None
        starts = timestamps - (timestamps - self._offset + self._size) % self._size
        for start in np.unique(starts).tolist():
            if start not in known:
                known[start] = TimeWindow(start, start + self._size)
        return starts  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._size}, {self._offset})"


class TumblingEventTimeWindows(_Tumbling):
    """Fixed, non-overlapping event-time windows of ``size`` (shifted by ``offset``)."""


class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed, non-overlapping processing-time windows of ``size``."""

    _event_time = False


class _Sliding(_TimeDomain, WindowAssigner):

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        name = type(self).__name__
        self._size = at_least(size, 1, what=f"{name}.of(size)", shown=size)
        self._slide = at_least(slide, 1, what=f"{name}.of(slide)", shown=slide)
        if abs(offset) >= slide:
            raise ConfigError(f"parameters must satisfy abs(offset) < slide, got offset {offset} ms "
                              f"and slide {slide} ms", key=f"{name}.of(offset)")
        self._offset = offset

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = None) -> Any:
        name = cls.__name__
        return cls(to_millis(size, what=f"{name}.of(size)"), to_millis(slide, what=f"{name}.of(slide)"),
                   0 if offset is None else to_millis(offset, what=f"{name}.of(offset)"))

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        if self._event_time:
            _needs_timestamp(timestamp, self)
        else:
            timestamp = context.get_current_processing_time()
        return list(_sliding_starts(timestamp, self._size, self._slide, self._offset))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._size}, {self._slide}, {self._offset})"


class SlidingEventTimeWindows(_Sliding):
    """Event-time windows of ``size`` starting every ``slide``."""


class SlidingProcessingTimeWindows(_Sliding):
    """Processing-time windows of ``size`` starting every ``slide``."""

    _event_time = False


class _Sessions(_TimeDomain, MergingWindowAssigner):
    """Sessions: each element opens ``[t, t + gap)``; overlapping sessions merge."""

    def __init__(self, gap: int | None, extractor: Any = None) -> None:
        if extractor is None:
            assert gap is not None
            at_least(gap, 1, what=f"{type(self).__name__}.with_gap(size)", shown=gap)
        self._gap = gap
        self._extractor = extractor

    @classmethod
    def with_gap(cls, size: Any) -> Any:
        return cls(to_millis(size, what=f"{cls.__name__}.with_gap(size)"))

    @classmethod
    def with_dynamic_gap(cls, extractor: Any) -> Any:
        """Sessions whose gap ``extractor.extract(element)`` (ms) chooses per element."""
        if not (hasattr(extractor, "extract") or callable(extractor)):
            raise ConfigError("needs a SessionWindowTimeGapExtractor (extract(element) -> ms) or a function",
                              key=f"{cls.__name__}.with_dynamic_gap(extractor)")
        return cls(None, extractor)

    def _gap_of(self, element: Any) -> int:
        if self._extractor is None:
            assert self._gap is not None
            return self._gap
        fn = getattr(self._extractor, "extract", self._extractor)
        gap = to_millis(fn(element), what=f"{type(self).__name__}.with_dynamic_gap(extractor)")
        if gap <= 0:
            raise ConfigError(f"Dynamic session time gap must satisfy 0 < gap, got {gap} ms for {element!r}",
                              key=f"{type(self).__name__}.with_dynamic_gap(extractor)")
        return gap

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        if self._event_time:
            _needs_timestamp(timestamp, self)
        else:
            timestamp = context.get_current_processing_time()
        return [TimeWindow(timestamp, timestamp + self._gap_of(element))]

    def merge_windows(self, windows: Iterable[Any], callback: Callable[[list[Any], Any], None]) -> None:
        TimeWindow.merge_windows(windows, callback)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._gap if self._extractor is None else self._extractor!r})"


class EventTimeSessionWindows(_Sessions):
    """Event-time sessions closed by a ``gap`` of inactivity."""


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap comes from each element."""


class ProcessingTimeSessionWindows(_Sessions):
    """Processing-time sessions closed by a ``gap`` of inactivity."""

    _event_time = False


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """Processing-time sessions whose gap comes from each element."""


class SessionWindowTimeGapExtractor(ABC):
    """Chooses each element's session gap (``extract(element) -> milliseconds``)."""

    @abstractmethod
    def extract(self, element: Any) -> int: ...


class GlobalWindows(WindowAssigner):
    """One window per key, never ending; it fires only with a trigger (``CountTrigger``)."""

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        return [GlobalWindow()]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindows()"


class CountTumblingWindowAssigner(WindowAssigner):
    """PyFlink's ``count_window(size)``: the n-th element of a key goes to count window
    ``n // size``, which fires when it holds ``size`` elements."""

    def __init__(self, window_size: int) -> None:
        self._size = _positive_count(window_size, "count_window(size)")

    @staticmethod
    def of(window_size: int) -> CountTumblingWindowAssigner:
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        n = context.next_element_number()
        return [CountWindow(n // self._size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return CountTrigger(self._size)

    def is_event_time(self) -> bool:
        return False


class CountSlidingWindowAssigner(WindowAssigner):
    """PyFlink's ``count_window(size, slide)``: window ``k`` holds a key's elements
    ``k * slide .. k * slide + size - 1`` and fires when it has ``size`` of them."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        self._size = _positive_count(window_size, "count_window(size)")
        self._slide = _positive_count(window_slide, "count_window(slide)")

    @staticmethod
    def of(window_size: int, window_slide: int) -> CountSlidingWindowAssigner:
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Any]:
        n = context.next_element_number()
        first = max(0, -((self._size - 1 - n) // self._slide))  # ceil((n - size + 1) / slide)
        return [CountWindow(k) for k in range(n // self._slide, first - 1, -1)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return CountTrigger(self._size)

    def is_event_time(self) -> bool:
        return False


def _positive_count(n: Any, what: str) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"must be a positive number of elements, got {n!r}", key=what)
    return n


__all__ = [
    "CountSlidingWindowAssigner", "CountTumblingWindowAssigner", "CountWindow",
    "DynamicEventTimeSessionWindows", "DynamicProcessingTimeSessionWindows", "EventTimeSessionWindows",
    "GlobalWindow", "GlobalWindows", "MergingWindowAssigner", "ProcessingTimeSessionWindows",
    "SessionWindowTimeGapExtractor", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows",
    "TimeWindow", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "Window", "WindowAssigner",
]
