"""``AsyncDataStream``: async I/O, as PyFlink's (a model server, a feature store, a database,
called without blocking the stream).

Example:
    >>> import asyncio
    >>> from accelflow.dataflow import AsyncFunction
    >>> class Lookup(AsyncFunction):
    ...     async def async_invoke(self, value):
    ...         await asyncio.sleep(0.001)         # a request to a server
    ...         return [value * 10]
    >>> env = Environment()
    >>> AsyncDataStream.ordered_wait(env.from_elements(1, 2, 3), Lookup(), timedelta(seconds=5), 10) \\
    ...     .execute_and_collect()
    [10, 20, 30]
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow import AsyncSpec
from accelflow.api._environment import Environment
from accelflow.api._names import shown
from accelflow.api._stream import DataStream


class AsyncDataStream:
    """Calls an ``AsyncFunction`` (``async def async_invoke(value)`` returning the input's
    outputs as a list, or a function returning an awaitable of that list) for each record,
    at most ``capacity`` at once, on an asyncio event loop of each subtask. An input that
    takes longer than ``timeout`` gets the function's ``timeout(value)`` outputs, or fails
    the job naming the operator. A checkpoint holds the inputs in flight, which a restore
    calls again (as Flink)."""

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: Any, timeout: Any, capacity: int = 100,
                     output_type: Any = None, *, name: str | None = None,
                     parallelism: int | None = None) -> DataStream:
        """Results in the order of their inputs."""
        return _add(data_stream, AsyncSpec(async_function, timeout, capacity, True), name, parallelism)._declare(
            output_type)

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: Any, timeout: Any, capacity: int = 100,
                       output_type: Any = None, *, name: str | None = None,
                       parallelism: int | None = None) -> DataStream:
        """Results as soon as they are done (watermarks still keep them in their place)."""
        return _add(data_stream, AsyncSpec(async_function, timeout, capacity, False), name, parallelism)._declare(
            output_type)


def _add(stream: Any, spec: AsyncSpec, name: str | None, parallelism: int | None) -> DataStream:
    if not isinstance(stream, DataStream):
        raise ConfigError(f"needs a DataStream, got {shown(stream)}", key="AsyncDataStream")
    return stream._then(spec, name or ("async_wait" if spec.ordered else "async_unordered_wait"), parallelism)


__all__ = ["AsyncDataStream", "Environment", "timedelta"]
