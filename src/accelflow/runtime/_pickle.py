"""Pickling user code for other processes: :func:`dumps` (cloudpickle, keeping the source file
of by-value code: ``accelflow.dataflow``'s, where a resident operator is pickled too), and
records whose class only cloudpickle can rebuild (:class:`ByValue`, :func:`send_pickled`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle

from accelflow.dataflow import dumps

__all__ = ["ByValue", "dumps", "send_pickled"]


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
