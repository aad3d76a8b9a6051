"""The driver SDK. Third-party drivers import from here only.

Example: a driver for one FPGA per TaskExecutor::

    from accelflow.resources import (
        ExternalResourceDriver, ExternalResourceDriverFactory, ExternalResourceInfo)

    class FPGADriver(ExternalResourceDriver):
        def retrieve_resource_info(self, amount):
            return {ExternalResourceInfo(index=str(i), vendor="xilinx") for i in range(amount)}

    class FPGADriverFactory(ExternalResourceDriverFactory):
        def create_external_resource_driver(self, params):
            return FPGADriver()

registered in ``pyproject.toml`` as::

    [project.entry-points."accelflow.external_resources"]
    fpga = "my_fpga:FPGADriverFactory"
"""

from typing import TYPE_CHECKING

from accelflow._errors import ConfigError, DiscoveryError
from accelflow._exports import lazy_exports
from accelflow.resources._api import (
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    ExternalResourceInfo,
    KubernetesResourceDecorator,
    KubernetesResources,
    RayResourceDecorator,
    RayResources,
    YarnResourceDecorator,
    info_properties,
)

if TYPE_CHECKING:
    from accelflow.resources._health import (
        ApplicationFault,
        DeviceHealth,
        DeviceQuarantined,
        DeviceRef,
        DeviceRejoined,
        Fault,
        HealthEvent,
        ProbeResult,
    )
    from accelflow.resources._device_watch import DeviceWatch
    from accelflow.resources._health_params import HEALTH_PARAMS, HealthConfig, split_health_params
    from accelflow.resources._provider import ExternalResourceInfoProvider, ResourceStatus
    from accelflow.resources._orphans import SUBTASK_ENV_VAR
    from accelflow.resources._reconcile import ComputeProcess, LeftoverCheck, Verdict
    from accelflow.resources._ray import ask_decorator as ask_decorator  # for accelflow.deploy; not SDK
    from accelflow.resources._ray import ray_accelerator_env, ray_resources_of
    from accelflow.resources._registry import (
        DriverEntryPoint,
        list_driver_entry_points,
        load_driver_factory,
    )

#: loaded on first use (PEP 562): a subtask needs ExternalResourceInfo, not the provider and
#: the configuration it reads (about 25 ms of every subtask's forkserver start-up)
_LAZY: dict[str, tuple[str, ...]] = {
    "._health": ("ApplicationFault", "DeviceHealth", "DeviceQuarantined", "DeviceRef", "DeviceRejoined",
                 "Fault", "HealthEvent", "ProbeResult"),
    "._device_watch": ("DeviceWatch",),
    "._health_params": ("HEALTH_PARAMS", "HealthConfig", "split_health_params"),
    "._provider": ("ExternalResourceInfoProvider", "ResourceStatus"),
    "._orphans": ("SUBTASK_ENV_VAR",),
    "._reconcile": ("ComputeProcess", "LeftoverCheck", "Verdict"),
    "._registry": ("DriverEntryPoint", "list_driver_entry_points", "load_driver_factory"),
    "._ray": ("ask_decorator", "ray_accelerator_env", "ray_resources_of"),
}

__all__ = [
    "ApplicationFault",
    "ComputeProcess",
    "ConfigError",
    "DeviceHealth",
    "DeviceQuarantined",
    "DeviceRef",
    "DeviceRejoined",
    "DeviceWatch",
    "DiscoveryError",
    "DriverEntryPoint",
    "ExternalResourceDriver",
    "ExternalResourceDriverFactory",
    "ExternalResourceInfo",
    "ExternalResourceInfoProvider",
    "Fault",
    "HEALTH_PARAMS",
    "HealthConfig",
    "HealthEvent",
    "KubernetesResourceDecorator",
    "KubernetesResources",
    "LeftoverCheck",
    "ProbeResult",
    "RayResourceDecorator",
    "RayResources",
    "ResourceStatus",
    "SUBTASK_ENV_VAR",
    "Verdict",
    "YarnResourceDecorator",
    "info_properties",
    "list_driver_entry_points",
    "load_driver_factory",
    "ray_accelerator_env",
    "ray_resources_of",
    "split_health_params",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
