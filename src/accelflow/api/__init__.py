"""The dataflow API: the DSL that builds a job graph (re-exported from :mod:`accelflow`)."""

from accelflow.api._stream import DataStream, Environment, KeyedStream

__all__ = ["DataStream", "Environment", "KeyedStream"]
