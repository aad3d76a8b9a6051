"""The renderer for ``execution.target: ray``: a KubeRay ``RayCluster`` and the config ConfigMap.

One worker group, ``taskexecutors``, with ``ray.number-taskmanager`` pods: each pod hosts one
TaskExecutor actor, so it requests (``requests == limits``) what one TaskExecutor needs: its
slots' CPUs (or ``taskmanager.cpu.cores``), its memory and ``amount`` of every external
resource under its Kubernetes name, with the node selectors and tolerations of the config and
the drivers (the same entries as the local target's Job, per TaskExecutor instead of times
``local.number-taskmanager``). Its ``rayStartParams`` advertise the same to Ray: ``num-cpus``,
``num-gpus`` (the GPU plugin's amount) and ``resources`` (every other resource, under its
``ray.resource-name``), so the actors' requests fit exactly one worker pod each.

The head pod schedules no actor (``num-cpus: 0``, ``num-gpus: 0``: a KubeRay head would
otherwise advertise every GPU of its host, kuberay#2098). It mounts the config at
``/etc/accelflow``; the job runs there as a client of the cluster (``accelflow run --conf
/etc/accelflow/accelflow-conf.yaml -D ray.address=auto job.py``: options before the script),
see ``docs/ray.md``.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

from accelflow._errors import DeploymentError
from accelflow.config import keys as k
from accelflow.config import Configuration
from accelflow.deploy._kubernetes import (
    DEFAULT_IMAGE,
    ObjectNames,
    RenderOptions,
    _image,
    config_map,
    kubernetes_client,
    object_names,
    pod_template,
    serialize,
    standard_labels,
)
from accelflow.deploy._quantities import (
    container_cpu,
    container_memory_bytes,
    kubernetes_cpu,
    kubernetes_memory,
)
from accelflow.deploy._requests import kubernetes_request
from accelflow.runtime.launchers import actor_resources

RAYCLUSTER_API_VERSION = "ray.io/v1"
WORKER_GROUP = "taskexecutors"
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
HEAD_CPU = "1"
HEAD_MEMORY = "2Gi"


def render_ray_cluster(config: Configuration, options: RenderOptions) -> list[dict[str, Any]]:
    """``[ConfigMap, RayCluster]``, in the order ``kubectl apply -f`` should create them.

    Example:
        >>> from accelflow.config import config_from
        >>> config = config_from(definitions=["execution.target=ray",
        ...     "external-resources=gpu", "external-resource.gpu.amount=2",
        ...     "external-resource.gpu.driver-factory.class=gpu",
        ...     "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu"])
        >>> _, cluster = render_ray_cluster(config, RenderOptions())
        >>> cluster["spec"]["workerGroupSpecs"][0]["rayStartParams"]
        {'num-cpus': '1', 'num-gpus': '2'}

    Raises:
        ConfigError: cpu, memory, names, labels or tolerations are invalid.
        DeploymentError: a pod template file is set (not supported for Ray yet), or a driver's
            entries conflict with the config.
    """
    if config.get_optional(k.KUBERNETES_POD_TEMPLATE_FILE) is not None:
        raise DeploymentError(
            f"{k.KUBERNETES_POD_TEMPLATE_FILE.name}: merging a pod template into a KubeRay "
            "RayCluster is not implemented yet; unset it for execution.target=ray, or edit the "
            "rendered RayCluster's worker template"
        )
    names = object_names(config)
    image = _image(config, options) or DEFAULT_IMAGE
    workers = _worker_group(config, names, image)  # checks the config before the client is used
    cluster = {
        "apiVersion": RAYCLUSTER_API_VERSION,
        "kind": "RayCluster",
        "metadata": serialize(kubernetes_client().V1ObjectMeta(
            name=names.job, namespace=names.namespace, labels=standard_labels(names))),
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0", "num-gpus": "0"},
                "template": _head_template(names, image),
            },
            "workerGroupSpecs": [workers],
        },
    }
    return [config_map(config, names), cluster]


def ray_start_params(config: Configuration) -> dict[str, str]:
    """What each worker pod advertises to Ray: one TaskExecutor actor's request.

    Example:
        >>> from accelflow.config import config_from
        >>> ray_start_params(config_from(values={"taskmanager.numberOfTaskSlots": 2,
        ...     "external-resources": "fpga", "external-resource.fpga.amount": 1}))
        {'num-cpus': '2', 'resources': '"{\\\\"fpga\\\\": 1}"'}
    """
    actor = actor_resources(config)  # the same request the Ray launcher makes
    params = {"num-cpus": str(actor["num_cpus"])}
    gpus, custom = actor["num_gpus"], actor["resources"]
    if gpus:
        params["num-gpus"] = str(gpus)
    if custom:
        # KubeRay passes the value to `ray start --resources` as written: a quoted JSON object
        params["resources"] = json.dumps(json.dumps(custom, sort_keys=True))
    return params


def _worker_group(config: Configuration, names: ObjectNames, image: str) -> dict[str, Any]:
    per_pod = config.get(k.NUMBER_TASKMANAGER)  # the local target's multiplier, undone here
    request = kubernetes_request(config)
    cpu = Fraction(container_cpu(config)) / per_pod
    memory = container_memory_bytes(config) // per_pod
    quantities = {
        "cpu": kubernetes_cpu(cpu),
        "memory": kubernetes_memory(memory),
        **{key: str(amount // per_pod) for key, amount in request.resources.items()},
    }
    template = pod_template(names, container=WORKER_CONTAINER, image=image,
                            quantities=quantities, request=request, mount_config=False)
    replicas = config.get(k.RAY_NUMBER_TASKMANAGER)
    return {
        "groupName": WORKER_GROUP,
        "replicas": replicas,
        "minReplicas": replicas,
        "maxReplicas": replicas,
        "rayStartParams": ray_start_params(config),
        "template": template,
    }


def _head_template(names: ObjectNames, image: str) -> dict[str, Any]:
    """The head's pod: no actor runs there; the config is mounted for the job's client."""
    return pod_template(names, container=HEAD_CONTAINER, image=image,
                        quantities={"cpu": HEAD_CPU, "memory": HEAD_MEMORY})
