"""``render_kubernetes``: pick the renderer for ``execution.target``.

One renderer per target, each in its own module: ``local`` renders a Job running the embedded
cluster (:mod:`accelflow.deploy._job`); ``ray`` renders a KubeRay ``RayCluster``
(:mod:`accelflow.deploy._kuberay`). A new target is a module and one line in
:data:`KUBERNETES_RENDERERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from accelflow._errors import DeploymentError
from accelflow.config.keys import EXECUTION_TARGET
from accelflow.config import Configuration
from accelflow.deploy._job import render_local_job
from accelflow.deploy._kuberay import render_ray_cluster
from accelflow.deploy._kubernetes import DEFAULT_JOB_PATH, RenderOptions

KubernetesRenderer = Callable[[Configuration, RenderOptions], list[dict[str, Any]]]

KUBERNETES_RENDERERS: Mapping[str, KubernetesRenderer] = MappingProxyType(
    {"local": render_local_job, "ray": render_ray_cluster}
)


def render_kubernetes(
    config: Configuration, *, job: str | None = None, image: str | None = None
) -> list[dict[str, Any]]:
    """The Kubernetes objects that run ``job`` with ``config``, as JSON-ready dicts.

    Example:
        >>> from accelflow.config import config_from
        >>> config = config_from(definitions=["external-resources=gpu",
        ...     "external-resource.gpu.amount=2",
        ...     "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu"])
        >>> config_map, job = render_kubernetes(config, job="/opt/accelflow/job.py")
        >>> job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        {'cpu': '1', 'memory': '1Gi', 'nvidia.com/gpu': '2'}

    Args:
        config: the validated config.
        job: the job script's path inside the image (default ``/opt/accelflow/job.py``).
        image: the container image; wins over ``kubernetes.container.image``.

    Raises:
        ConfigError: a key, argument or the pod template is invalid (names the culprit).
        DeploymentError: a driver conflicts with the config, or the target has no renderer.
        DriverLoadError: a configured driver factory cannot be loaded.
        MissingDependencyError: the ``kubernetes`` package is not installed.
    """
    target = config.get(EXECUTION_TARGET)
    renderer = KUBERNETES_RENDERERS.get(target)
    if renderer is None:
        raise DeploymentError(
            f"execution.target={target}: rendering Kubernetes objects for this target is not "
            f"implemented; use one of {', '.join(sorted(KUBERNETES_RENDERERS))} (local renders a "
            "Job running the embedded local cluster, ray a KubeRay RayCluster)"
        )
    options = RenderOptions(job=DEFAULT_JOB_PATH if job is None else job, image=image)
    return renderer(config, options)
