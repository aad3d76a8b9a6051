"""cloudpickle, keeping the source file of functions pickled by value.

Lambdas, nested functions and those of a job script (``__main__``) travel by value. Since
cloudpickle 3.1.3 their code objects arrive named ``<dynamic-code>``, so a subtask's traceback
no longer says in which file the user's failing line is. :func:`dumps` pickles code objects
as cloudpickle does and restores their ``co_filename`` on load (through :func:`_named`, which
the loading process imports from here).
"""

from __future__ import annotations

import io
import pickle
import types
from collections import ChainMap
from collections.abc import Callable
from typing import Any

import cloudpickle

_code_reduce: Callable[[types.CodeType], tuple[Any, ...]] = cloudpickle.Pickler.dispatch_table[types.CodeType]


def _named(make: Callable[..., types.CodeType], args: tuple[Any, ...], filename: str) -> types.CodeType:
    """The code object that ``make(*args)`` rebuilds, with its file name back."""
    return make(*args).replace(co_filename=filename)


def _reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    make, args = _code_reduce(code)[:2]
    return _named, (make, args, code.co_filename)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the source file of by-value code kept; loaded by
    ``cloudpickle.loads`` (or ``pickle.loads``) where accelflow is importable."""
    with io.BytesIO() as out:
        _Pickler(out, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return out.getvalue()


class ByValue:
    """``obj`` pickled by cloudpickle inside a plain pickle; loading it gives ``obj`` back.

    A record whose class a job script defines (``__main__``) reaches a subtask only inside the
    job's functions, rebuilt there by cloudpickle; plain pickle, which a channel uses, looks the
    class up by name and fails (``attribute lookup Point on __main__ failed``). Such a chunk
    travels wrapped: the receiving subtask rebuilds the class too, and the client gets its own
    class back (cloudpickle tracks a class by an id given when the client first pickled it).

    Example:
        >>> import pickle
        >>> pickle.loads(pickle.dumps(ByValue([1, 2])))
        [1, 2]
    """

    __slots__ = ("payload",)

    def __init__(self, obj: Any) -> None:
        self.payload = dumps(obj)

    def __reduce__(self) -> tuple[Any, ...]:
        return cloudpickle.loads, (self.payload,)


def send_pickled(send: Callable[[Any], None], obj: Any, wrap: Callable[[Any], Any] = lambda o: o) -> bool:
    """``send(wrap(obj))``, or where plain pickle cannot find a class of ``obj`` by name (a job
    script's, or one defined in a function: ``Can't pickle local object``),
    ``send(wrap(ByValue(obj)))``; returns whether it had to (later chunks of the same records
    then go by value at once). ``send`` pickles before it writes anything; what cloudpickle
    cannot pickle either raises cloudpickle's error."""
    try:
        send(wrap(obj))
        return False
    except (pickle.PicklingError, AttributeError):
        pass
    send(wrap(ByValue(obj)))
    return True
