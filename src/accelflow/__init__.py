"""accelflow: stream and batch processing whose scheduler understands accelerators.

Layout: the public API is re-exported here from private modules (``_errors``, ``api``,
``dataflow``, ``runtime``); driver authors use :mod:`accelflow.resources`, test authors
:mod:`accelflow.testing`. ``tests/test_public_api.py`` pins this surface.
"""

from accelflow._exports import publish
from accelflow._errors import (
    AccelflowError,
    AccelflowInternalError,
    AllocationError,
    ConfigError,
    CoordinationError,
    DataFormatError,
    DeploymentError,
    DiscoveryError,
    DriverLoadError,
    JobCancelledError,
    JobError,
    MissingDependencyError,
    TransportError,
)
from accelflow.dataflow import (
    IdxSource,
    RichFilterFunction,
    RichFlatMapFunction,
    RichFunction,
    RichMapBatchesFunction,
    RichMapFunction,
    RichReduceFunction,
    RuntimeContext,
    SinkFunction,
    Source,
)
from accelflow.api import DataStream, Environment, KeyedStream
from accelflow.resources import ExternalResourceInfo
from accelflow.runtime.client import JobClient
from accelflow.runtime.jobmanager import JobResult

__version__ = "0.1.0"

__all__ = [
    "AccelflowError",
    "AccelflowInternalError",
    "AllocationError",
    "ConfigError",
    "CoordinationError",
    "DataFormatError",
    "DataStream",
    "DeploymentError",
    "DiscoveryError",
    "DriverLoadError",
    "Environment",
    "ExternalResourceInfo",
    "IdxSource",
    "JobCancelledError",
    "JobClient",
    "JobError",
    "JobResult",
    "KeyedStream",
    "MissingDependencyError",
    "RichFilterFunction",
    "RichFlatMapFunction",
    "RichFunction",
    "RichMapBatchesFunction",
    "RichMapFunction",
    "RichReduceFunction",
    "RuntimeContext",
    "SinkFunction",
    "Source",
    "TransportError",
]

publish(globals(), __all__)
