"""cloudpickle, keeping the source file of functions pickled by value.

Lambdas, nested functions and those of a job script (``__main__``) travel by value. Since
cloudpickle 3.1.3 their code objects arrive named ``<dynamic-code>``, so a subtask's traceback
no longer says in which file the user's failing line is. :func:`dumps` pickles code objects
as cloudpickle does and restores their ``co_filename`` on load (through :func:`_named`, which
the loading process imports from here).
"""

from __future__ import annotations

import io
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
