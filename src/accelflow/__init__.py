"""accelflow: stream and batch processing whose scheduler understands accelerators.

The public API is re-exported here from private modules; driver authors use
:mod:`accelflow.resources`, test authors :mod:`accelflow.testing`.
"""

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
)
from accelflow.resources._api import ExternalResourceInfo

__version__ = "0.1.0"

__all__ = [
    "AccelflowError",
    "AccelflowInternalError",
    "AllocationError",
    "ConfigError",
    "CoordinationError",
    "DataFormatError",
    "DeploymentError",
    "DiscoveryError",
    "DriverLoadError",
    "ExternalResourceInfo",
    "JobCancelledError",
    "JobError",
    "MissingDependencyError",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__"):
        _obj.__module__ = "accelflow"
del _name, _obj
