"""``render_yarn``: a YARN Services API specification (``POST /app/v1/services``).

One component, ``taskexecutor``, with one container that runs ``accelflow run --conf
conf/accelflow-conf.yaml <job>`` (options first: after the script they would be its own; the
embedded local cluster, ``local.number-taskmanager`` TaskExecutors). Its ``resource`` asks
for whole vcores, memory in MiB and, in ``additional``, every resource type that has an
``external-resource.<name>.yarn.config-key`` (or that a driver's
:class:`accelflow.resources.YarnResourceDecorator` adds), times the TaskExecutors. The config
travels inside the spec as a ``YAML`` config file, which YARN writes to
``conf/accelflow-conf.yaml`` in the container's working directory. The spec is plain JSON:
rendering it needs no ``kubernetes`` client (memory is read by accelflow's config parser).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from accelflow._errors import ConfigError, DeploymentError
from accelflow.config.keys import (
    EXECUTION_TARGET,
    EXTERNAL_RESOURCES,
    YARN_APPLICATION_NAME,
    YARN_QUEUE,
)
from accelflow.config import Configuration
from accelflow.deploy._kubernetes import (
    CONFIG_FILE_NAME,
    DEFAULT_JOB_PATH,
    DEFAULT_NAME,
    RenderOptions,
    run_args,
)
from accelflow._names import yarn_service_name_problem
from accelflow.deploy._quantities import (
    container_cpu,
    container_memory_bytes,
    yarn_memory_mib,
    yarn_vcores,
)
from accelflow.deploy._requests import yarn_request

COMPONENT_NAME = "taskexecutor"
SERVICE_VERSION = "1.0.0"


def render_yarn(
    config: Configuration, *, job: str | None = None, image: str | None = None
) -> dict[str, Any]:
    """The YARN service spec that runs ``job`` with ``config``, as JSON-ready data.

    Example:
        With ``external-resource.gpu.amount=2`` and ``yarn.config-key=yarn.io/gpu``, the
        component's ``resource`` is ``{"cpus": 1, "memory": "1024", "additional":
        {"yarn.io/gpu": {"value": 2, "unit": ""}}}``.

    Args:
        config: the validated config.
        job: the job script as the container sees it: inside the Docker image when ``image``
            is given, else on every NodeManager host (default ``/opt/accelflow/job.py``).
        image: a Docker image with accelflow installed; without it the command runs on the
            host (YARN's default container runtime).

    Raises:
        ConfigError: a key or argument is invalid (names it).
        DeploymentError: a driver conflicts with the config, or execution.target is not local.
        DriverLoadError: a configured driver factory cannot be loaded.
    """
    target = config.get(EXECUTION_TARGET)
    if target != "local":
        raise DeploymentError(
            f"execution.target={target}: accelflow render yarn runs the embedded local "
            "cluster only; use execution.target=local"
        )
    options = RenderOptions(job=DEFAULT_JOB_PATH if job is None else job, image=image)
    service: dict[str, Any] = {
        "name": _service_name(config),
        "version": SERVICE_VERSION,
        "description": f"accelflow job {options.job}",
        "components": [_component(config, options)],
    }
    if (queue := config.get_optional(YARN_QUEUE)) is not None:
        service["queue"] = queue
    return service


def _service_name(config: Configuration) -> str:
    name = config.get_optional(YARN_APPLICATION_NAME) or DEFAULT_NAME
    if why := yarn_service_name_problem(name):
        raise ConfigError(why, key=YARN_APPLICATION_NAME.name)
    if name == COMPONENT_NAME:
        raise ConfigError(
            f"{name!r} is the name of the service's component; YARN needs them to differ",
            key=YARN_APPLICATION_NAME.name,
        )
    return name


def _component(config: Configuration, options: RenderOptions) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "cpus": yarn_vcores(container_cpu(config)),
        "memory": str(yarn_memory_mib(container_memory_bytes(config))),
    }
    if additional := yarn_request(config):
        resource["additional"] = {
            name: {"value": amount, "unit": ""} for name, amount in additional.items()
        }
    command = ["accelflow", *run_args(f"conf/{CONFIG_FILE_NAME}", options.job)]
    component: dict[str, Any] = {
        "name": COMPONENT_NAME,
        "number_of_containers": 1,
        "restart_policy": "NEVER",
        "launch_command": shlex.join(command),
        "resource": resource,
        "configuration": {
            "files": [
                {
                    "type": "YAML",
                    "dest_file": CONFIG_FILE_NAME,
                    "properties": yarn_properties(config.raw),
                }
            ]
        },
    }
    if options.image is not None:
        component["artifact"] = {"id": options.image, "type": "DOCKER"}
    return component


def yarn_properties(raw: Mapping[str, Any]) -> dict[str, str]:
    """The config as YARN config-file properties, which are strings.

    Every value keeps a form accelflow's config parser reads back: lists and mappings become
    JSON, except ``external-resources``, which becomes ``'gpu;fpga'``.

    Example:
        >>> yarn_properties({"external-resources": ["gpu", "fpga"], "rest.enabled": True})
        {'external-resources': 'gpu;fpga', 'rest.enabled': 'true'}
    """
    return {key: _text(key, value) for key, value in sorted(raw.items())}


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple) and key == EXTERNAL_RESOURCES.name:
        return ";".join(str(item) for item in value)
    if isinstance(value, list | tuple | Mapping):
        return json.dumps(value, default=str)
    return str(value)
