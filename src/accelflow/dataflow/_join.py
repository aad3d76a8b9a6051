"""The window join and co-group (PyFlink's ``JoinFunction`` and ``CoGroupFunction``) and the
functions that build them from a union and a keyed window, as Flink's ``CoGroupedStreams``:
each side's records are tagged with their input (:class:`Tagger`), the two streams united and
keyed by :class:`TaggedKey` (the first key selector for the first input, the second for the
second), windowed, and :class:`CoGroupWindow` splits a window's records by tag again.

Example:
    >>> class Pair(JoinFunction):
    ...     def join(self, value1, value2): return (value1, value2)
    >>> window = CoGroupWindow(JoinCoGroup(Pair()))
    >>> list(window.apply("k", None, [(0, "a"), (1, "x"), (0, "b"), (1, "y")]))
    [('a', 'x'), ('a', 'y'), ('b', 'x'), ('b', 'y')]
    >>> list(CoGroupWindow(JoinCoGroup(Pair())).apply("k", None, [(0, "a")]))
    []
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow._functions import RichFunction, is_function_class
from accelflow.dataflow._window_functions import WindowFunction

__all__ = ["CoGroupFunction", "CoGroupWindow", "JoinCoGroup", "JoinFunction", "TaggedKey", "Tagger"]


class JoinFunction(RichFunction, ABC):
    """``join(value1, value2)``: one output for each pair of a window's records with equal
    keys, ``value1`` from the first stream, ``value2`` from the second (an inner join)."""

    @abstractmethod
    def join(self, value1: Any, value2: Any) -> Any: ...


class CoGroupFunction(RichFunction, ABC):
    """``co_group(first, second, collector)``: called once per key and window with the
    window's records of the first stream and of the second (either may be empty); emit with
    ``collector.collect(value)``, or return / yield the outputs."""

    @abstractmethod
    def co_group(self, first: Iterable[Any], second: Iterable[Any], collector: Any) -> Iterable[Any] | None: ...


class Tagger:
    """The map of one input: ``(input_index, record)`` (Flink's ``Input1Tagger``/``Input2Tagger``)."""

    def __init__(self, input_index: int) -> None:
        self.input_index = input_index

    def __call__(self, value: Any) -> tuple[int, Any]:
        return (self.input_index, value)


class TaggedKey:
    """The key of a tagged record: ``where``'s selector for the first input, ``equal_to``'s for
    the second (Flink's ``UnionKeySelector``). As Flink requires one key type for both inputs,
    a key whose type differs from the other input's keys fails the job, naming the operator."""

    def __init__(self, first: Any, second: Any, operator: str) -> None:
        self.selectors = (_method(first, "get_key"), _method(second, "get_key"))
        self.operator = operator
        self._types: list[type | None] = [None, None]

    def __call__(self, tagged: tuple[int, Any]) -> Any:
        index, value = tagged
        key = self.selectors[index](value)
        if self._types[index] is None:
            self._types[index] = type(key)
            other = self._types[1 - index]
            if other is not None and other is not type(key):
                first, second = (t.__name__ for t in self._types if t is not None)
                raise ConfigError(
                    f"the keys of the two inputs are not of one type: where() gives {first}, equal_to() gives "
                    f"{second}; Flink requires one key type for both: make both key selectors return the same "
                    "type, e.g. str(...) on both", key=f"operator {self.operator!r}")
        return key


class JoinCoGroup(CoGroupFunction):
    """A join as a co-group (Flink's ``JoinCoGroupFunction``): ``join`` for every pair."""

    def __init__(self, join_function: Any) -> None:
        self.function = join_function

    def open(self, ctx: Any) -> None:
        self.function = _open(self.function, ctx, "join")

    def close(self) -> None:
        _call(self.function, "close")

    def co_group(self, first: Iterable[Any], second: Iterable[Any], collector: Any) -> Iterable[Any]:
        join, seconds = _method(self.function, "join"), list(second)
        return [join(a, b) for a in first for b in seconds]


class CoGroupWindow(WindowFunction[Any, Any, Any, Any]):
    """The window function of a co-group (Flink's ``CoGroupWindowFunction``): a window's
    tagged records split by input, handed to the co-group function."""

    def __init__(self, co_group_function: Any) -> None:
        self.function = co_group_function

    def open(self, ctx: Any) -> None:
        self.function = _open(self.function, ctx, "co_group")

    def close(self) -> None:
        _call(self.function, "close")

    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        sides: tuple[list[Any], list[Any]] = ([], [])
        for index, value in inputs:
            sides[index].append(value)
        collector = _Collector()
        returned = _method(self.function, "co_group")(sides[0], sides[1], collector)
        if returned is not None:
            collector.values.extend(returned)
        return collector.values


class _Collector:
    """PyFlink's/Flink's ``Collector``: ``collect(value)``."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def collect(self, value: Any) -> None:
        self.values.append(value)


def _method(fn: Any, method: str) -> Any:
    """``fn.method`` of a function object, or ``fn`` itself (a plain function, or a class
    called per call: ``str.join`` is not a join function)."""
    bound = None if inspect.isclass(fn) else getattr(fn, method, None)
    return bound if callable(bound) else fn


def _open(fn: Any, ctx: Any, method: str) -> Any:
    """Opens a user function as the runtime opens a rich function (a function class, see
    :func:`is_function_class`, is built first, in the subtask; ``get_runtime_context()``
    works) and returns it; any other class (a record class, ``complex``) is called per call."""
    if inspect.isclass(fn):
        if not is_function_class(fn, [method]):
            return fn
        fn = fn()
    if isinstance(fn, RichFunction):
        fn._runtime_context = ctx
    _call(fn, "open", ctx)
    return fn


def _call(fn: Any, method: str, *args: Any) -> None:
    hook = getattr(fn, method, None)
    if callable(hook):
        hook(*args)
