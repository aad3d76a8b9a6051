"""Building blocks of every Kubernetes renderer: names, the config ConfigMap, the pod.

The TaskExecutor pod runs one container, ``accelflow-taskexecutor``, whose command is
``accelflow run --conf /etc/accelflow/accelflow-conf.yaml <job>``: the embedded local cluster
with ``local.number-taskmanager`` TaskExecutors. Options come before the job script, as in
``flink run [OPTIONS] <job>``; after it they would be the script's own arguments. The config
reaches the pod as a ConfigMap mounted read-only at ``/etc/accelflow``. Objects are built with the ``kubernetes`` client's
models (imported lazily) and serialized with ``ApiClient().sanitize_for_serialization``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import yaml

from accelflow import __version__
from accelflow._errors import ConfigError
from accelflow.config.keys import (
    KUBERNETES_IMAGE,
    KUBERNETES_JOB_NAME,
    KUBERNETES_NAMESPACE,
    KUBERNETES_POD_TEMPLATE_FILE,
    TASKMANAGER_CPU,
    TASKMANAGER_MEMORY,
)
from accelflow.config import Configuration
from accelflow._names import dns_label_problem, object_name_problem
from accelflow.deploy._pod_template import CONTAINER_NAME, load_pod_template, merge_pod_template
from accelflow.deploy._quantities import (
    container_cpu,
    container_memory_bytes,
    kubernetes_cpu,
    kubernetes_memory,
    kubernetes_module,
)
from accelflow.deploy._requests import KubernetesRequest, kubernetes_request

WHAT = "accelflow render kubernetes"
DEFAULT_IMAGE = f"accelflow:{__version__}"
"""Image used when neither ``--image``, ``kubernetes.container.image`` nor the pod template
names one; build it from ``docs/deployment.md``."""
DEFAULT_JOB_PATH = "/opt/accelflow/job.py"
"""Job script run when ``--job`` is not given: a path inside the image."""
DEFAULT_NAME = "accelflow-job"
CONFIG_FILE_NAME = "accelflow-conf.yaml"
CONFIG_MOUNT_PATH = "/etc/accelflow"
CONFIG_VOLUME = "accelflow-conf"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderOptions:
    """Command-line choices of a renderer.

    Attributes:
        job: the job script, a path inside the container (e.g. ``/opt/accelflow/job.py``).
        image: the container image, or ``None`` to use the config's or the default.
    """

    job: str = DEFAULT_JOB_PATH
    image: str | None = None

    def __post_init__(self) -> None:
        if not self.job.strip():
            raise ConfigError("must not be empty; give the job script's path", key="--job")
        image = self.image
        if image is not None and (not image.strip() or any(c.isspace() for c in image)):
            raise ConfigError(
                f"{image!r} is not an image reference such as 'registry/accelflow:0.1.0'",
                key="--image",
            )


@dataclass(frozen=True, slots=True)
class ObjectNames:
    """Names of the rendered objects, validated."""

    job: str
    namespace: str | None
    config_map: str


def kubernetes_client() -> Any:
    """The ``kubernetes.client`` module, imported now.

    Raises:
        MissingDependencyError: ``pip install 'accelflow[kubernetes]'``.
    """
    return kubernetes_module("kubernetes.client", what=WHAT)


def serialize(obj: Any) -> Any:
    """A model (or a dict/list holding models) as plain JSON-ready data with camelCase keys."""
    with kubernetes_client().ApiClient() as api:  # closes its (unused) connection pool
        return api.sanitize_for_serialization(obj)


def object_names(config: Configuration) -> ObjectNames:
    """The Job/ConfigMap names and namespace from ``kubernetes.job-name``/``.namespace``.

    Raises:
        ConfigError: a name is not a valid Kubernetes name.
    """
    job = config.get_optional(KUBERNETES_JOB_NAME) or DEFAULT_NAME
    if why := object_name_problem(job):
        raise ConfigError(why, key=KUBERNETES_JOB_NAME.name)
    namespace = config.get_optional(KUBERNETES_NAMESPACE)
    if namespace is not None and (why := dns_label_problem(namespace)):
        raise ConfigError(why, key=KUBERNETES_NAMESPACE.name)
    return ObjectNames(job, namespace, f"{job}-conf")


def standard_labels(names: ObjectNames) -> dict[str, str]:
    """The ``app.kubernetes.io`` labels of every rendered object."""
    return {
        "app.kubernetes.io/name": "accelflow",
        "app.kubernetes.io/instance": names.job,
        "app.kubernetes.io/component": "taskexecutor",
    }


def metadata(names: ObjectNames, name: str) -> Any:
    """``V1ObjectMeta`` for an object called ``name`` with the standard labels."""
    k8s = kubernetes_client()
    return k8s.V1ObjectMeta(name=name, namespace=names.namespace, labels=standard_labels(names))


def config_map(config: Configuration, names: ObjectNames) -> dict[str, Any]:
    """The ConfigMap holding the flat config (every key as given) as ``accelflow-conf.yaml``."""
    k8s = kubernetes_client()
    text = yaml.safe_dump(_plain(dict(config.raw)), sort_keys=True, default_flow_style=False)
    cm = k8s.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=metadata(names, names.config_map),
        data={CONFIG_FILE_NAME: text},
    )
    return cast(dict[str, Any], serialize(cm))


def _plain(value: Any) -> Any:
    """``value`` with anything YAML cannot write (e.g. a ``Fraction`` given through the Python
    API) turned into its string, which the config parsers read back (``'1/2'``)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | datetime.date):
        return value
    return str(value)


def taskexecutor_pod_template(
    config: Configuration, options: RenderOptions, names: ObjectNames
) -> dict[str, Any]:
    """The serialized pod template spec of the pod that runs the job, user template merged.

    Raises:
        ConfigError: cpu, memory, labels, tolerations or the pod template are invalid.
        DeploymentError: a driver's entries are invalid or conflict with the config.
    """
    template_file = config.get_optional(KUBERNETES_POD_TEMPLATE_FILE)
    # Without a template the default image is known now; with one, the template's image
    # (if any) must win over the default, so the default is filled in after the merge.
    image = _image(config, options) or (DEFAULT_IMAGE if template_file is None else None)
    request = kubernetes_request(config)
    source = config.sources.get(KUBERNETES_POD_TEMPLATE_FILE.name)
    user = None if template_file is None else load_pod_template(template_file, source=source)
    ours = pod_template(
        names,
        container=CONTAINER_NAME,
        image=image,
        quantities={
            "cpu": kubernetes_cpu(container_cpu(config)),
            "memory": kubernetes_memory(container_memory_bytes(config)),
            **{key: str(amount) for key, amount in request.resources.items()},
        },
        args=run_args(f"{CONFIG_MOUNT_PATH}/{CONFIG_FILE_NAME}", options.job),
        request=request,
        restart_policy="Never",
        annotations={DEFAULT_CONTAINER_ANNOTATION: CONTAINER_NAME},
    )
    if template_file is not None and user is not None:
        keep = [
            name
            for name, key in (("cpu", TASKMANAGER_CPU), ("memory", TASKMANAGER_MEMORY))
            if key.name not in config.values
        ]
        ours = merge_pod_template(user, ours, user_may_keep=keep, path=template_file, source=source)
    for container in ours["spec"]["containers"]:
        if container.get("name") == CONTAINER_NAME and not container.get("image"):
            container["image"] = DEFAULT_IMAGE
    return ours


def pod_template(
    names: ObjectNames,
    *,
    container: str,
    image: str | None,
    quantities: Mapping[str, str],
    args: list[str] | None = None,
    request: KubernetesRequest | None = None,
    restart_policy: str | None = None,
    annotations: Mapping[str, str] | None = None,
    mount_config: bool = True,
) -> dict[str, Any]:
    """The serialized pod template of every renderer: the standard labels and one container.

    The container asks for ``quantities`` in both ``requests`` and ``limits`` (extended
    resources must; for cpu and memory it makes the pod ``Guaranteed``), runs ``accelflow
    args`` when ``args`` is given, and mounts the config ConfigMap read-only at
    ``/etc/accelflow`` when ``mount_config``. ``request`` adds its node selector and
    tolerations to the pod.
    """
    k8s = kubernetes_client()
    mounts = volumes = None
    if mount_config:
        mounts = [k8s.V1VolumeMount(name=CONFIG_VOLUME, mount_path=CONFIG_MOUNT_PATH,
                                    read_only=True)]
        volumes = [k8s.V1Volume(name=CONFIG_VOLUME,
                                config_map=k8s.V1ConfigMapVolumeSource(name=names.config_map))]
    main = k8s.V1Container(
        name=container,
        image=image,
        command=["accelflow"] if args is not None else None,
        args=args,
        resources=k8s.V1ResourceRequirements(requests=dict(quantities), limits=dict(quantities)),
        volume_mounts=mounts,
    )
    pod = k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(
            labels=standard_labels(names), annotations=dict(annotations) if annotations else None
        ),
        spec=k8s.V1PodSpec(
            containers=[main],
            restart_policy=restart_policy,
            node_selector=(dict(request.node_selector) or None) if request else None,
            tolerations=(_tolerations(k8s, request.tolerations) or None) if request else None,
            volumes=volumes,
        ),
    )
    return cast(dict[str, Any], serialize(pod))


def run_args(conf: str, job: str, *definitions: str) -> list[str]:
    """``accelflow``'s arguments that run ``job`` with the config file ``conf``: every option
    first, then the script (after the script, ``accelflow run`` hands arguments to it).

    Example:
        >>> run_args("/etc/accelflow/conf.yaml", "/opt/job.py", "ray.address=auto")
        ['run', '--conf', '/etc/accelflow/conf.yaml', '-D', 'ray.address=auto', '/opt/job.py']
    """
    options = [arg for definition in definitions for arg in ("-D", definition)]
    return ["run", "--conf", conf, *options, job]


def _image(config: Configuration, options: RenderOptions) -> str | None:
    image = options.image or config.get_optional(KUBERNETES_IMAGE)
    if image is not None and any(c.isspace() for c in image):
        raise ConfigError(
            f"{image!r} is not an image reference such as 'registry/accelflow:0.1.0'",
            key="--image" if options.image else KUBERNETES_IMAGE.name,
        )
    return image


def _tolerations(k8s: Any, tolerations: Iterable[Mapping[str, Any]]) -> list[Any]:
    python_names = {json: py for py, json in k8s.V1Toleration.attribute_map.items()}
    return [
        k8s.V1Toleration(**{python_names[name]: value for name, value in t.items()})
        for t in tolerations
    ]


def dump_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML (``---`` between documents), keys in the order built.

    Example:
        >>> print(dump_yaml([{"kind": "ConfigMap"}, {"kind": "Job"}]), end="")
        kind: ConfigMap
        ---
        kind: Job
    """
    return yaml.dump_all(
        [dict(d) for d in documents], Dumper=_Dumper, sort_keys=False, default_flow_style=False
    )


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the config file in the ConfigMap) as ``|`` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)
