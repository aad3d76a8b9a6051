"""The dataflow API: the DSL that builds a job graph (re-exported from :mod:`accelflow`)."""

from accelflow.api._environment import Environment
from accelflow.api._stream import DataStream
from accelflow.api._keyed import KeyedStream, WindowedStream
from accelflow.api._connected import ConnectedStreams, IntervalJoin, IntervalJoined
from accelflow.api._async import AsyncDataStream
from accelflow.api._joined import CoGroupedStreams, JoinedStreams
from accelflow.api._broadcast import BroadcastConnectedStream, BroadcastStream
from accelflow.api._pyflink import (
    CheckpointConfig, CheckpointingMode, Configuration, ExecutionConfig, ExternalizedCheckpointRetention,
    RuntimeExecutionMode,
)
from accelflow.connectors import Encoder, FileSink, FileSource, OutputFileConfig, RollingPolicy, StreamFormat

#: PyFlink's name of :class:`Environment` (the same class)
StreamExecutionEnvironment = Environment

__all__ = [
    "AsyncDataStream", "BroadcastConnectedStream", "BroadcastStream", "CheckpointConfig", "CheckpointingMode",
    "CoGroupedStreams", "Configuration", "ConnectedStreams", "DataStream", "Encoder", "Environment", "ExecutionConfig",
    "ExternalizedCheckpointRetention", "FileSink", "FileSource", "IntervalJoin", "IntervalJoined", "JoinedStreams",
    "KeyedStream", "OutputFileConfig", "RollingPolicy", "RuntimeExecutionMode", "StreamExecutionEnvironment",
    "StreamFormat", "WindowedStream",
]
