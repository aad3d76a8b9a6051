"""What each external resource asks of Ray, through the optional :class:`RayResourceDecorator`.

A factory that implements the protocol decides (the GPU plugin asks for ``num_gpus`` and has
Ray's GPU ids handed to its driver); any other resource becomes a Ray custom resource named
``external-resource.<name>.ray.resource-name`` (default: the resource name). The Ray launcher
sums these per TaskExecutor actor; inside the actor :func:`ray_accelerator_env` says which
variables to set from Ray's assigned accelerator ids before the drivers run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from accelflow._errors import AccelflowError, DeploymentError
from accelflow.config import ExternalResourceSpec
from accelflow.resources._api import RayResourceDecorator, RayResources
from accelflow.resources._registry import load_driver_factory


def ray_resources_of(spec: ExternalResourceSpec) -> RayResources:
    """What one TaskExecutor actor asks Ray for on behalf of resource ``spec``.

    Example:
        >>> from accelflow.config import ExternalResourceSpec
        >>> ray_resources_of(ExternalResourceSpec(name="fpga", amount=2)).resources
        {'fpga': 2}

    Raises:
        DriverLoadError: the configured factory cannot be loaded.
        DeploymentError: the factory's ``ray_resources`` failed or returned something else
            than :class:`RayResources`.
    """
    default = RayResources(resources={spec.ray_resource_name or spec.name: spec.amount})
    if spec.driver_factory is None:
        return default
    key = spec.key("driver-factory.class")
    factory = load_driver_factory(spec.driver_factory, resource=spec.name, key=key)
    if not isinstance(factory, RayResourceDecorator):
        return default
    try:
        wanted = factory.ray_resources(spec.params, spec.amount)
    except AccelflowError:
        raise
    except Exception as exc:
        raise DeploymentError(
            f"{key}: {spec.driver_factory!r}.ray_resources() failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(wanted, RayResources):
        raise DeploymentError(
            f"{key}: {spec.driver_factory!r}.ray_resources() returned "
            f"{type(wanted).__name__}, not accelflow.resources.RayResources"
        )
    return wanted


def ray_accelerator_env(
    specs: Iterable[ExternalResourceSpec], accelerator_ids: Mapping[str, Sequence[object]]
) -> dict[str, str]:
    """The variables a TaskExecutor actor sets before its drivers run, from Ray's choice.

    Args:
        specs: the configured resources.
        accelerator_ids: ``ray.get_runtime_context().get_accelerator_ids()``, e.g.
            ``{"GPU": ["2", "3"]}``.

    Example:
        >>> from accelflow.config import ExternalResourceSpec
        >>> gpu = ExternalResourceSpec(name="gpu", amount=2, driver_factory="gpu")
        >>> ray_accelerator_env([gpu], {"GPU": ["2", "3"]})
        {'ACCELFLOW_RAY_GPU_IDS': '2,3'}
    """
    env: dict[str, str] = {}
    for spec in specs:
        wanted = ray_resources_of(spec)
        if wanted.accelerator_ids_env:
            ids = accelerator_ids.get(wanted.accelerator, [])
            env[wanted.accelerator_ids_env] = ",".join(str(i) for i in ids)
    return env
