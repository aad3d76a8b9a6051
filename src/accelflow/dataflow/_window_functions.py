"""What a window computes, with PyFlink's names: incremental ``ReduceFunction`` and
``AggregateFunction``, and the functions that see a whole pane (``WindowFunction``,
``ProcessWindowFunction`` and their all-window twins for ``window_all``).

Example:
    >>> class Average(AggregateFunction):
    ...     def create_accumulator(self): return (0, 0)
    ...     def add(self, value, acc): return (acc[0] + value, acc[1] + 1)
    ...     def get_result(self, acc): return acc[0] / acc[1]
    ...     def merge(self, a, b): return (a[0] + b[0], a[1] + b[1])
    >>> f = Average()
    >>> f.get_result(f.add(4, f.add(2, f.create_accumulator())))
    3.0
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from accelflow.dataflow._functions import RichFunction

__all__ = [
    "AggregateFunction", "AllWindowFunction", "ProcessAllWindowFunction", "ProcessWindowFunction",
    "ReduceFunction", "WindowFunction",
]


# PyFlink's type parameters (``ProcessWindowFunction[tuple, tuple, str, TimeWindow]``)
IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
W = TypeVar("W")
ACC = TypeVar("ACC")


class ReduceFunction(RichFunction, ABC):
    """Combines two values into one of the same type."""

    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class AggregateFunction(RichFunction, ABC, Generic[IN, ACC, OUT]):
    """Incremental aggregation through an accumulator."""

    @abstractmethod
    def create_accumulator(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        """Joins two accumulators (needed by merging windows: sessions)."""
        raise NotImplementedError(f"{type(self).__name__}.merge is needed to merge windows (sessions)")


class WindowFunction(RichFunction, ABC, Generic[IN, OUT, KEY, W]):
    """``apply(key, window, inputs)`` over a whole pane; returns or yields outputs."""

    @abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class AllWindowFunction(RichFunction, ABC, Generic[IN, OUT, W]):
    """``apply(window, inputs)`` for ``window_all``."""

    @abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class _WindowContext(ABC, Generic[W]):
    """``window()``, ``current_processing_time()``, ``current_watermark()``,
    ``window_state()``, ``global_state()`` and ``output(tag, value)``."""

    @abstractmethod
    def window(self) -> Any: ...

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def window_state(self) -> Any: ...

    @abstractmethod
    def global_state(self) -> Any: ...

    @abstractmethod
    def output(self, output_tag: Any, value: Any) -> None: ...


class ProcessWindowFunction(RichFunction, ABC, Generic[IN, OUT, KEY, W]):
    """``process(key, context, elements)`` with the pane's context; ``clear(context)`` when
    the window is dropped (to clear per-window state)."""

    Context = _WindowContext

    @abstractmethod
    def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Any] | None: ...

    def clear(self, context: Any) -> None:
        """The window is being dropped: clear what ``context.window_state()`` holds."""


class ProcessAllWindowFunction(RichFunction, ABC, Generic[IN, OUT, W]):
    """``process(context, elements)`` for ``window_all``."""

    Context = _WindowContext

    @abstractmethod
    def process(self, context: Any, elements: Iterable[Any]) -> Iterable[Any] | None: ...

    def clear(self, context: Any) -> None:
        """The window is being dropped."""
