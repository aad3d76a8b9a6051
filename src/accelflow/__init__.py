"""accelflow: stream and batch processing whose scheduler understands accelerators.

Layout: the public API is re-exported here from private modules (``_errors``, ``api``,
``dataflow``, ``runtime``); driver authors use :mod:`accelflow.resources`, test authors
:mod:`accelflow.testing`. ``tests/test_public_api.py`` pins this surface.

The names load lazily (module ``__getattr__``, PEP 562): ``import accelflow`` costs only the
error tree, so the TaskExecutor and subtask processes, which import ``accelflow.runtime``,
do not import the API, the client, NumPy, YAML... they do not use. A name's first use imports
its module and publishes every name of that module at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports, publish
from accelflow._errors import (
    AccelflowError,
    AccelflowInternalError,
    AllocationError,
    CheckpointError,
    ConfigError,
    CoordinationError,
    DataFormatError,
    DeploymentError,
    DiscoveryError,
    DriverLoadError,
    JobCancelledError,
    JobError,
    MissingDependencyError,
    SubtaskHung,
    TransportError,
)

if TYPE_CHECKING:
    from accelflow.api import DataStream, Environment, KeyedStream
    from accelflow.connectors import IdxSource
    from accelflow.dataflow import (
        RichFilterFunction,
        RichFlatMapFunction,
        RichFunction,
        RichMapBatchesFunction,
        RichMapFunction,
        RichReduceFunction,
        RuntimeContext,
        Sink,
        SinkFunction,
        Source,
    )
    from accelflow.resources import ExternalResourceInfo
    from accelflow.runtime.client import JobClient
    from accelflow.runtime.jobmanager import JobResult

#: module (relative) -> the public names it provides, imported on first use
_LAZY: dict[str, tuple[str, ...]] = {
    ".connectors": ("IdxSource",),
    ".dataflow": (
        "RichFilterFunction", "RichFlatMapFunction", "RichFunction",
        "RichMapBatchesFunction", "RichMapFunction", "RichReduceFunction", "RuntimeContext",
        "Sink", "SinkFunction", "Source",
    ),
    ".api": ("DataStream", "Environment", "KeyedStream"),
    ".resources": ("ExternalResourceInfo",),
    ".runtime.client": ("JobClient",),
    ".runtime.jobmanager": ("JobResult",),
}

__version__ = "0.1.0"

__all__ = [
    "AccelflowError",
    "AccelflowInternalError",
    "AllocationError",
    "CheckpointError",
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
    "Sink",
    "SinkFunction",
    "Source",
    "SubtaskHung",
    "TransportError",
]

publish(globals(), [name for name in __all__ if not any(name in names for names in _LAZY.values())])


__getattr__, __dir__ = lazy_exports(globals(), _LAZY, public=True)
