"""Exceptions taken apart and made again, for the error codec of :mod:`accelflow._errors`:
what pickle sees of one, an instance made from those parts without the class's own
``__init__``, a class found by its ``module:qualname``, and the user's part of a traceback.
Nothing here knows accelflow's error tree.
"""

from __future__ import annotations

import importlib
import os
import pickle
import traceback
from types import WrapperDescriptorType
from typing import Any

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def parts_of(exc: BaseException) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``exc``'s constructor arguments and attributes as pickle sees them, with what C keeps
    outside ``args`` and ``__dict__`` (an ``OSError``'s ``filename``, an ``ImportError``'s
    ``name``).

    Example:
        >>> parts_of(FileNotFoundError(2, "No such file", "/d/x.csv"))
        ((2, 'No such file', '/d/x.csv'), {})
    """
    try:
        reduced = exc.__reduce__()
    except Exception:
        reduced = ()
    if isinstance(reduced, tuple) and len(reduced) >= 2 and reduced[0] is type(exc) \
            and isinstance(reduced[1], tuple):
        state = reduced[2] if len(reduced) > 2 and isinstance(reduced[2], dict) else {}
        return reduced[1], state
    return exc.args, vars(exc)


def made_again(cls: type[BaseException], args: tuple[Any, ...], attributes: dict[str, Any]) -> BaseException | None:
    """An instance of ``cls`` with these ``args`` and attributes, made without running an
    ``__init__`` written in Python (its signature need not fit ``args``; one written in C, as
    ``OSError``'s, runs); ``None`` when even that fails (a ``__new__`` that wants other
    arguments)."""
    try:
        exc = cls.__new__(cls, *args)
        init = cls.__init__
        (init if isinstance(init, WrapperDescriptorType) else BaseException.__init__)(exc, *args)
    except Exception:
        return None
    for name, value in attributes.items():  # as unpickling does (BaseException.__setstate__)
        try:
            setattr(exc, name, value)
        except Exception:
            vars(exc)[name] = value
    return exc if isinstance(exc, cls) else None


def class_named(class_path: str) -> type[BaseException] | None:
    """The exception class named ``module:qualname``, importing its module; ``None`` where it
    cannot be found here (or the name means another class here)."""
    module_name, _, qualname = class_path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    if isinstance(obj, type) and issubclass(obj, BaseException) \
            and f"{obj.__module__}:{obj.__qualname__}" == class_path:
        return obj
    return None


def user_traceback(exc: BaseException) -> str | None:
    """``exc``'s traceback (with what it chains) without the frames of files in the accelflow
    package: what is left is the user's code and the libraries it called, first. ``None``
    when no frame is left (accelflow itself raised it)."""
    shown = traceback.TracebackException.from_exception(exc)
    if not _drop_own_frames(shown):
        return None
    return "".join(shown.format()).rstrip()


def _drop_own_frames(shown: traceback.TracebackException) -> int:
    """Remove accelflow's frames from ``shown`` and what it chains; how many frames are left."""
    shown.stack = traceback.StackSummary.from_list(
        [frame for frame in shown.stack if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR)])
    left = len(shown.stack)
    for chained in (shown.__cause__, shown.__context__, *(shown.exceptions or ())):
        if chained is not None:
            left += _drop_own_frames(chained)
    return left


def pickles(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True
