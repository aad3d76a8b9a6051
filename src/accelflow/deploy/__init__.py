"""Render cluster-manager requests from one config: Kubernetes manifests and YARN services.

The container that runs the job hosts ``local.number-taskmanager`` TaskExecutors (the
embedded local cluster), so it asks for ``amount * local.number-taskmanager`` of every
external resource, in both ``requests`` and ``limits`` on Kubernetes and in
``resource.additional`` on YARN. See ``docs/deployment.md``.

Example::

    from accelflow.config import config_from
    from accelflow.deploy import dump_yaml, render_kubernetes

    config = config_from(definitions=[
        "external-resources=gpu", "external-resource.gpu.amount=2",
        "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu"])
    print(dump_yaml(render_kubernetes(config, job="/opt/accelflow/job.py")))

Layout: ``_requests`` collects per-resource entries (config and driver decorators) for
every renderer; ``_quantities`` does cpu/memory; ``_kubernetes`` builds the shared objects;
``_job`` is the renderer of ``execution.target: local``; ``_targets`` picks one renderer
per target; ``_pod_template`` merges a user pod template; ``_yarn`` renders YARN.
"""

from accelflow.deploy._kubernetes import (
    CONFIG_FILE_NAME,
    CONFIG_MOUNT_PATH,
    DEFAULT_IMAGE,
    DEFAULT_JOB_PATH,
    dump_yaml,
)
from accelflow.deploy._pod_template import CONTAINER_NAME, load_pod_template, merge_pod_template
from accelflow.deploy._requests import (
    GPU_PRODUCT_LABEL,
    SPARK_YARN_RESOURCE_TYPES,
    KubernetesRequest,
    kubernetes_request,
    toleration_problem,
    yarn_request,
)
from accelflow.deploy._targets import KUBERNETES_RENDERERS, render_kubernetes
from accelflow.deploy._yarn import render_yarn, yarn_properties

__all__ = [
    "CONFIG_FILE_NAME",
    "CONFIG_MOUNT_PATH",
    "CONTAINER_NAME",
    "DEFAULT_IMAGE",
    "DEFAULT_JOB_PATH",
    "GPU_PRODUCT_LABEL",
    "KUBERNETES_RENDERERS",
    "SPARK_YARN_RESOURCE_TYPES",
    "KubernetesRequest",
    "dump_yaml",
    "kubernetes_request",
    "load_pod_template",
    "merge_pod_template",
    "render_kubernetes",
    "render_yarn",
    "toleration_problem",
    "yarn_properties",
    "yarn_request",
]

KubernetesRequest.__module__ = "accelflow.deploy"
