"""The renderer for ``execution.target: local``: a ``batch/v1`` Job and its config ConfigMap.

The Job's pod runs the embedded local cluster (``accelflow run``) once: ``backoffLimit: 0``
and ``restartPolicy: Never``, because restarts are the runtime's business
(``restart-strategy``), not Kubernetes'.
"""

from __future__ import annotations

from typing import Any, cast

from accelflow.config import Configuration
from accelflow.deploy._kubernetes import (
    RenderOptions,
    config_map,
    kubernetes_client,
    metadata,
    object_names,
    serialize,
    taskexecutor_pod_template,
)


def render_local_job(config: Configuration, options: RenderOptions) -> list[dict[str, Any]]:
    """``[ConfigMap, Job]``, in the order ``kubectl apply -f`` should create them."""
    names = object_names(config)
    # The pod template first: every key and argument is checked before the client is needed,
    # so bad input is named even where the kubernetes package is missing.
    template = taskexecutor_pod_template(config, options, names)
    k8s = kubernetes_client()
    job = k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=metadata(names, names.job),
        spec=k8s.V1JobSpec(backoff_limit=0, template=k8s.V1PodTemplateSpec()),
    )
    rendered = cast(dict[str, Any], serialize(job))
    # The pod template is already serialized (a user template is merged as data, so fields
    # this client version does not model survive); newer clients would re-validate a dict
    # passed to V1JobSpec against their own model, so it is set on the serialized Job.
    rendered["spec"]["template"] = template
    return [config_map(config, names), rendered]
