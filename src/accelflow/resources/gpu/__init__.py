"""The first-party GPU plugin: driver factory, driver, coordination file and discovery helpers.

Registered as the entry point ``gpu`` of ``accelflow.external_resources``::

    external-resources: gpu
    external-resource.gpu.amount: 2
    external-resource.gpu.driver-factory.class: gpu

Every implementation module is private; this namespace only re-exports. See ``docs/gpu.md``.
"""

from accelflow._exports import publish
from accelflow.resources.gpu._coordination import (
    Allocation,
    CoordinationFile,
    default_coordination_path,
)
from accelflow.resources.gpu._device import INFO_PROPERTIES, GPUDevice
from accelflow.resources.gpu._discovery import discover_gpus
from accelflow.resources.gpu._driver import GPUDriver
from accelflow.resources.gpu._factory import GPUDriverFactory
from accelflow.resources.gpu._owner import OWNER_ENV_VAR, Liveness, Owner, owner_from_env
from accelflow.resources.gpu._params import (
    GPU_DISCOVERY_ENV_VAR,
    PARAMS,
    GPUDriverConfig,
    ScriptConfig,
)
from accelflow.resources.gpu._script import parse_script_output, run_discovery_script

__all__ = [
    "GPU_DISCOVERY_ENV_VAR",
    "INFO_PROPERTIES",
    "OWNER_ENV_VAR",
    "PARAMS",
    "Allocation",
    "CoordinationFile",
    "GPUDevice",
    "GPUDriver",
    "GPUDriverConfig",
    "GPUDriverFactory",
    "Liveness",
    "Owner",
    "ScriptConfig",
    "default_coordination_path",
    "discover_gpus",
    "owner_from_env",
    "parse_script_output",
    "run_discovery_script",
]

publish(globals(), __all__)
