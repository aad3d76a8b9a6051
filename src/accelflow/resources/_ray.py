"""What each external resource asks of Ray, through the optional :class:`RayResourceDecorator`.

A factory that implements the protocol decides (the GPU plugin asks for ``num_gpus`` and has
Ray's GPU ids handed to its driver); any other resource becomes a Ray custom resource named
``external-resource.<name>.ray.resource-name`` (default: the resource name). The Ray launcher
sums these per TaskExecutor actor; inside the actor :func:`ray_accelerator_env` says which
variables to set from Ray's assigned accelerator ids before the drivers run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
    wanted = ask_decorator(spec, RayResourceDecorator, "ray_resources", RayResources,
                           "accelflow.resources.RayResources")
    return default if wanted is None else wanted


def ask_decorator(
    spec: ExternalResourceSpec, protocol: type, method: str, returns: type, returns_text: str
) -> Any:
    """Ask ``spec``'s driver factory, if it implements the optional decorator ``protocol``
    (Kubernetes, YARN, Ray), for ``method(params, amount)`` and check that the result is a
    ``returns``.

    The one place a driver decorator is called: its exception becomes a
    :class:`DeploymentError` naming the driver, resource and config key, and so does a result
    of the wrong type (``returns_text`` says what was expected).

    Returns:
        The result, or ``None`` when no factory is configured or it does not implement
        ``protocol``.

    Raises:
        DriverLoadError: the configured factory cannot be loaded.
    """
    if spec.driver_factory is None:
        return None
    key = spec.key("driver-factory.class")
    factory = load_driver_factory(spec.driver_factory, resource=spec.name, key=key)
    if not isinstance(factory, protocol):
        return None
    origin = f"driver {spec.driver_factory!r} of resource {spec.name!r} ({key})"
    try:
        result = getattr(factory, method)(spec.params, spec.amount)
    except AccelflowError:
        raise
    except Exception as exc:
        raise DeploymentError(f"{origin}: {method}() failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, returns):
        raise DeploymentError(f"{origin}: {method}() must return {returns_text}, got {type(result).__name__}")
    return result


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
