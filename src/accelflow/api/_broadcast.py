"""The broadcast state pattern (PyFlink's ``BroadcastStream`` and
``BroadcastConnectedStream``): ``rules.broadcast(MapStateDescriptor(...))`` then
``stream.connect(broadcast_stream).process(BroadcastProcessFunction)``, or
``keyed.connect(broadcast_stream).process(KeyedBroadcastProcessFunction)``.

Example:
    >>> from accelflow.dataflow.eventtime import BroadcastProcessFunction, MapStateDescriptor
    >>> RATES = MapStateDescriptor("rates")
    >>> class Convert(BroadcastProcessFunction):
    ...     def process_element(self, value, ctx):
    ...         yield value
    ...     def process_broadcast_element(self, value, ctx):
    ...         ctx.get_broadcast_state(RATES).put(*value)
    ...         yield ctx.get_broadcast_state(RATES).items()
    >>> env = Environment({"parallelism.default": 2})
    >>> rates = env.from_elements(("eur", 2)).broadcast(RATES)
    >>> sorted(env.from_elements(1).connect(rates).process(Convert()).execute_and_collect(), key=repr)
    [1, [('eur', 2)], [('eur', 2)]]
"""

from __future__ import annotations

from typing import Any

from accelflow.dataflow import BroadcastProcessSpec, KeyedBroadcastProcessSpec, check_broadcast_descriptors
from accelflow.api._environment import Environment
from accelflow.api._keyed import KeyedStream
from accelflow.api._stream import DataStream


class BroadcastStream:
    """``stream.broadcast(*descriptors)``: every record to every subtask of the operator it is
    connected to, with the broadcast state ``descriptors`` (``MapStateDescriptor``) there."""

    def __init__(self, stream: DataStream, descriptors: tuple[Any, ...]) -> None:
        check_broadcast_descriptors(descriptors, f"broadcast() of operator {stream._operator.name!r}")
        self.stream = stream
        self.descriptors = descriptors


class BroadcastConnectedStream:
    """A stream (keyed or not) connected to a :class:`BroadcastStream`: :meth:`process` it."""

    def __init__(self, stream: DataStream, broadcast_stream: BroadcastStream) -> None:
        self.stream = stream
        self.broadcast_stream = broadcast_stream

    def process(self, func: Any, output_type: Any = None, *, name: str | None = None,
                parallelism: int | None = None) -> DataStream:
        """A ``BroadcastProcessFunction`` (a non-keyed stream) or a
        ``KeyedBroadcastProcessFunction`` (a keyed stream): ``process_element`` for the
        stream's records, ``process_broadcast_element`` for the broadcast stream's."""
        keyed = isinstance(self.stream, KeyedStream)
        spec = (KeyedBroadcastProcessSpec if keyed else BroadcastProcessSpec)(func, self.broadcast_stream.descriptors)
        env = self.stream._env
        edges = [self.stream._edge(0), self.broadcast_stream.stream._edge(1)]
        return env._add(spec, name or "broadcast_process", parallelism, edges)._declare(output_type)


__all__ = ["BroadcastConnectedStream", "BroadcastStream", "Environment"]
