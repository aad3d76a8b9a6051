"""Facade helpers: re-exported names show their public module (as httpx and trio do), so
tracebacks and reprs read ``accelflow.Environment`` rather than
``accelflow.api._stream.Environment``; and a facade can load its modules on first use
(PEP 562), so a process imports only what it touches (a TaskExecutor never loads the API)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
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


def lazy_exports(
    namespace: dict[str, Any], lazy: Mapping[str, Sequence[str]], *, public: bool = False
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a facade whose names load on first use.

    Args:
        namespace: the facade's ``globals()``.
        lazy: module (relative to the facade) -> the names it provides.
        public: also :func:`publish` the names once loaded.
    """
    module_of = {name: module for module, names in lazy.items() for name in names}
    facade = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {facade!r} has no attribute {name!r}")
        source = importlib.import_module(module, facade)
        for each in lazy[module]:
            namespace[each] = getattr(source, each)
        if public:
            publish(namespace, lazy[module])
        return namespace[name]

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
