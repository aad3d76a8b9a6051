"""cloudpickle, keeping the source file of functions pickled by value.

Lambdas, nested functions and those of a job script (``__main__``) travel by value. Since
cloudpickle 3.1.3 their code objects arrive named ``<dynamic-code>``, so a traceback of the
process that runs them no longer says in which file the user's failing line is. :func:`dumps`
pickles code objects as cloudpickle does and restores their ``co_filename`` on load (through
:func:`_named`, which the loading process imports from here). The runtime pickles its plans
with it (``accelflow.runtime.dumps``), and a resident operator its function where the job is
built (``_resident.py``).

Example:
    >>> import cloudpickle
    >>> def double(x):
    ...     return 2 * x
    >>> cloudpickle.loads(dumps(double)).__code__.co_filename == double.__code__.co_filename
    True
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from collections.abc import Callable
from typing import IO, Any

import cloudpickle

_code_reduce: Callable[[types.CodeType], tuple[Any, ...]] = cloudpickle.Pickler.dispatch_table[types.CodeType]


def _named(make: Callable[..., types.CodeType], args: tuple[Any, ...], filename: str) -> types.CodeType:
    """The code object that ``make(*args)`` rebuilds, with its file name back."""
    return make(*args).replace(co_filename=filename)


def _reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    make, args = _code_reduce(code)[:2]
    return _named, (make, args, code.co_filename)


class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler, keeping the file name of the code it pickles by value."""

    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any, pickler: Callable[[IO[bytes], int], Pickler] = Pickler) -> bytes:
    """``cloudpickle.dumps(obj)``, with the source file of by-value code kept; loaded by
    ``cloudpickle.loads`` (or ``pickle.loads``) where accelflow is importable. ``pickler``:
    makes the :class:`Pickler` (of a subclass) to use, given the file and protocol."""
    with io.BytesIO() as out:
        pickler(out, cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return out.getvalue()
