"""How operators call user functions, and what they say when a call's result cannot go on.

A user function may be a function (or any callable: ``str``, ``int``, ``bool``, a
``functools.partial``), an object with the operator's method (``map``, ``flat_map``,
``process_element``...), or a class. A class is built once per subtask, its instance then used
as an object, when it is an accelflow function class (a ``RichFunction``: ``RichMapFunction``,
``ProcessFunction``...) or when it defines the operator's method or ``__call__``; any other
class (``str``, ``int``, ``tuple``, a dataclass or namedtuple of records) is called per record
like any callable, as PyFlink's ``map(str)`` and Spark's ``rdd.map(str)`` do.

The errors (:func:`not_iterable`, :func:`unhashable_key`, :func:`unpicklable_record`) are made
after the fact, once the call that failed has raised: the per-record loops check nothing.

Example:
    >>> class Double:
    ...     def map(self, x):
    ...         return 2 * x
    >>> isinstance(function_object(Double, "map"), Double), function_object(str, "map") is str
    (True, True)
    >>> bind(int, "map")
    (None, <class 'int'>)
"""

from __future__ import annotations

import dis
import inspect
import re
from collections.abc import Callable, Iterable
from multiprocessing.reduction import ForkingPickler
from typing import Any

from accelflow.dataflow import is_function_class
from accelflow.runtime.subtask._keys import stable_hash

#: the instructions that iterate a value (``for``, ``[*value]``)
_ITERATING = (dis.opmap["GET_ITER"], dis.opmap["LIST_EXTEND"])


def function_object(fn: Any, *methods: str | None) -> Any:
    """``fn``, or an instance of it where ``fn`` is a function class (see :func:`is_function_class`)."""
    return fn() if inspect.isclass(fn) and is_function_class(fn, methods) else fn


def bind(fn: Any, method: str | None) -> tuple[Any, Callable[..., Any]]:
    """(the object whose ``open``/``close`` run, None for none; what to call per record):
    ``fn.method`` of a function object, else ``fn`` itself (a class that is no function
    class is called per record: it has no ``open`` or ``close`` to run)."""
    obj = function_object(fn, method)
    if inspect.isclass(obj):
        return None, obj
    if method and hasattr(obj, method):
        return obj, getattr(obj, method)  # type: ignore[no-any-return]
    return obj, obj  # type: ignore[no-any-return]


def named(fn: Any) -> str:
    """A user function as a message names it: ``by_user (job.py:12)``, ``<lambda> (job.py:9)``."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    return f"{name} ({code.co_filename.rpartition('/')[2]}:{code.co_firstlineno})" if code is not None else name


def not_iterable(operator: str, exc: TypeError, module: str) -> TypeError | None:
    """The error for a ``flat_map`` function whose result was not iterable, where ``exc`` is
    what iterating it raised in the operator's own loop (``for out in fn(r)`` or ``[*fn(r)]``,
    in a frame of ``module``); None where ``exc`` came from elsewhere (the function itself,
    its generator)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_globals.get("__name__") != module or \
            tb.tb_frame.f_code.co_code[tb.tb_lasti] not in _ITERATING:
        return None
    found = re.search(r"'(.+)' object is not iterable|must be an iterable, not (.+)", str(exc))
    returned = (found[1] or found[2]) if found else "a value"
    loop = tb.tb_frame.f_locals  # the loop's record (where the comprehension's own frame keeps it)
    record = f" for the record {_shown(loop['r'])}" if "r" in loop else ""
    return TypeError(
        f"operator {operator!r} (flat_map): its function returned {returned}{record}, which is not "
        "iterable: a flat_map function returns an iterable of output records (a list, tuple or "
        "generator); return [value] for one record, [] for none, or use map")


def unhashable_key(operator: str, key_fn: Any, records: Iterable[Any]) -> TypeError | None:
    """The error for the first of ``records`` whose key (``key_fn(record)``) cannot be a key
    (Python cannot hash it), or None where every key can; ``operator`` is the keyed operator."""
    for record in records:
        try:
            key = key_fn(record)
        except Exception:  # the selector's own error: the caller raises it
            return None
        try:
            stable_hash(key)
            hash(key)
        except TypeError:
            return TypeError(
                f"operator {operator!r}: the key selector {named(key_fn)} of its key_by returned the "
                f"{_type(key)} {_shown(key)} for the record {_shown(record)}, which cannot be a key (it is "
                "not hashable, as a dict key must be): return a tuple (tuple(key)) or a str instead")
    return None


def unpicklable_record(edge: str, records: Iterable[Any]) -> TypeError | None:
    """The error for the first of ``records`` that cannot be pickled to cross ``edge`` (e.g.
    ``from operator 'parse' to operator 'score'``), or None where every record can."""
    for record in records:
        try:
            ForkingPickler.dumps(record)  # as a channel's connection pickles it
        except Exception as exc:
            fix = ("emit plain data (numbers, str, tuples, dicts, NumPy arrays, your own classes), and make "
                   "locks, files, clients or models in open() of the rich function that uses them")
            return TypeError(
                f"a record {edge} cannot be sent: it is a {_type(record)} {_shown(record)}, which cannot be "
                f"pickled ({type(exc).__name__}: {exc}). Records that go to another subtask (key_by, "
                f"rebalance, a change of parallelism) are pickled: {fix}")
    return None


def _type(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _shown(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:
        return "(no repr)"
    return text if len(text) <= limit else f"{text[:limit]}..."


__all__ = ["bind", "function_object", "named", "not_iterable", "unhashable_key",
           "unpicklable_record"]
