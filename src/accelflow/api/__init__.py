"""The dataflow API: the DSL that builds a job graph (re-exported from :mod:`accelflow`)."""

from accelflow.api._environment import Environment
from accelflow.api._stream import DataStream
from accelflow.api._keyed import KeyedStream, WindowedStream
from accelflow.api._connected import ConnectedStreams, IntervalJoin, IntervalJoined
from accelflow.api._async import AsyncDataStream
from accelflow.api._joined import CoGroupedStreams, JoinedStreams
from accelflow.api._broadcast import BroadcastConnectedStream, BroadcastStream

__all__ = [
    "AsyncDataStream", "BroadcastConnectedStream", "BroadcastStream", "CoGroupedStreams", "ConnectedStreams",
    "DataStream", "Environment", "IntervalJoin", "IntervalJoined", "JoinedStreams", "KeyedStream", "WindowedStream",
]
