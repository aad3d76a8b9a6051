"""Make re-exported names show their public module (as httpx and trio do), so tracebacks
and reprs read ``accelflow.Environment`` rather than ``accelflow.api._stream.Environment``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def publish(namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Set ``__module__`` of every class and function in ``names`` to the namespace's module."""
    module = namespace["__name__"]
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) or callable(obj):
            try:
                obj.__module__ = module
            except (AttributeError, TypeError):  # builtins and some C objects refuse it
                pass
