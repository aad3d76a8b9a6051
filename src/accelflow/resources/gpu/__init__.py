"""The first-party GPU plugin: driver factory, driver, coordination file and discovery helpers.

Registered as the entry point ``gpu`` of ``accelflow.external_resources``::

    external-resources: gpu
    external-resource.gpu.amount: 2
    external-resource.gpu.driver-factory.class: gpu

Every implementation module is private; this namespace only re-exports. The coordination file
is host coordination (:mod:`accelflow.resources.coordination`) for resource ``gpu``; its
``Allocation``, ``Liveness`` and ``Owner`` are re-exported here as they always were. See
``docs/gpu.md``.
"""

from accelflow._exports import publish
from accelflow.resources.coordination import Allocation, Liveness, Owner
from accelflow.resources.gpu._coordination import (
    OWNER_ENV_VAR,
    CoordinationFile,
    default_coordination_path,
    owner_from_env,
)
from accelflow.resources.gpu._device import INFO_PROPERTIES, GPUDevice
from accelflow.resources.gpu._discovery import discover_gpus
from accelflow.resources.gpu._driver import GPUDriver
from accelflow.resources.gpu._factory import GPUDriverFactory
from accelflow.resources.gpu._params import (
    GPU_DISCOVERY_ENV_VAR,
    PARAMS,
    GPUDriverConfig,
    ScriptConfig,
)
from accelflow.resources.gpu._script import parse_script_output, run_discovery_script
from accelflow.resources.gpu._xid import Xid, classify, drill_xid, xid_fault

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
    "Xid",
    "classify",
    "default_coordination_path",
    "discover_gpus",
    "drill_xid",
    "owner_from_env",
    "parse_script_output",
    "run_discovery_script",
    "xid_fault",
]

#: re-exported from accelflow.resources.coordination, which they keep as their public module
_SHARED = ("Allocation", "Liveness", "Owner")
publish(globals(), [name for name in __all__ if name not in _SHARED])
