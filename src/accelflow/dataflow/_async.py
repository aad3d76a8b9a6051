"""``AsyncFunction``, as in PyFlink: calls to a model server or a feature store that do not
block the stream (``AsyncDataStream.ordered_wait / unordered_wait``).

Example::

    class Enrich(AsyncFunction):
        async def async_invoke(self, value):
            features = await store.get(value.user)     # any awaitable
            return [(value, features)]                 # the outputs of this input (a list)
        def timeout(self, value):
            return [(value, None)]                     # instead of failing the job
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from accelflow.dataflow._functions import RichFunction

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class AsyncFunction(RichFunction, ABC, Generic[IN, OUT]):
    """One asynchronous operation per input: :meth:`async_invoke` is a coroutine returning the
    input's outputs as a list; it runs on the subtask's event loop (one thread per subtask),
    up to the operator's capacity at once."""

    @abstractmethod
    async def async_invoke(self, value: Any) -> list[Any]:
        """The outputs of ``value`` (a list; raise to fail the job)."""

    def timeout(self, value: Any) -> list[Any]:
        """Called when :meth:`async_invoke` of ``value`` took longer than the operator's
        timeout; its list is emitted instead. By default the job fails with a ``TimeoutError``."""
        raise TimeoutError(f"Async function call has timed out for input: {value}")


__all__ = ["AsyncFunction"]
