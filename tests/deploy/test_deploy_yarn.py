"""``render_yarn``: the YARN Services API spec (the body of ``POST /app/v1/services``)."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from accelflow import ConfigError, DeploymentError
from accelflow.cli._main import build_parser
from accelflow.config import Configuration, config_from, memory_bytes
from accelflow.deploy import SPARK_YARN_RESOURCE_TYPES, render_yarn, yarn_properties

GPU = (
    "external-resources=gpu",
    "external-resource.gpu.amount=2",
    "external-resource.gpu.yarn.config-key=yarn.io/gpu",
)


def conf(*definitions: str) -> Configuration:
    return config_from(definitions=definitions)


def component(service: dict[str, Any]) -> dict[str, Any]:
    (only,) = service["components"]
    return only  # type: ignore[no-any-return]


def test_the_done_when_config_asks_yarn_for_two_gpus() -> None:
    service = render_yarn(conf(*GPU))
    assert component(service)["resource"]["additional"] == {
        "yarn.io/gpu": {"value": 2, "unit": ""}
    }


def test_the_spec_has_the_shape_of_the_services_api() -> None:
    service = render_yarn(conf(*GPU, "yarn.application.queue=gpu"), job="/jobs/train.py")
    assert set(service) == {"name", "version", "description", "components", "queue"}
    assert (service["name"], service["version"], service["queue"]) == ("accelflow-job", "1.0.0", "gpu")
    comp = component(service)
    assert set(comp) == {
        "name", "number_of_containers", "restart_policy", "launch_command", "resource",
        "configuration",
    }
    assert (comp["name"], comp["number_of_containers"], comp["restart_policy"]) == (
        "taskexecutor", 1, "NEVER"
    )
    assert shlex.split(comp["launch_command"]) == [
        "accelflow", "run", "--conf", "conf/accelflow-conf.yaml", "/jobs/train.py"
    ]
    assert comp["resource"]["cpus"] == 1 and isinstance(comp["resource"]["cpus"], int)
    assert comp["resource"]["memory"] == "1024"
    (config_file,) = comp["configuration"]["files"]
    assert (config_file["type"], config_file["dest_file"]) == ("YAML", "accelflow-conf.yaml")


def test_a_job_path_with_spaces_is_quoted_for_the_shell() -> None:
    command = component(render_yarn(conf(*GPU), job="/jobs/my job.py"))["launch_command"]
    assert shlex.split(command)[-1] == "/jobs/my job.py"


def test_accelflow_run_reads_the_launch_command_as_its_own_options() -> None:
    """``--conf`` after the script would be handed to the script and the config dropped."""
    command = component(render_yarn(conf(*GPU), job="/jobs/train.py"))["launch_command"]
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.conf, args.script, args.args) == (
        "conf/accelflow-conf.yaml", "/jobs/train.py", []
    )


def test_resources_are_multiplied_by_the_taskexecutors() -> None:
    resource = component(
        render_yarn(
            conf(
                *GPU,
                "local.number-taskmanager=3",
                "taskmanager.numberOfTaskSlots=2",
                "taskmanager.memory.process.size=1.5Gi",
            )
        )
    )["resource"]
    assert resource == {
        "cpus": 6,
        "memory": str(3 * 1536),
        "additional": {"yarn.io/gpu": {"value": 6, "unit": ""}},
    }


@pytest.mark.parametrize(("size", "mib"), [("1000M", "954"), ("512Mi", "512"), ("1", "1")])
def test_memory_is_rounded_up_to_whole_mib(size: str, mib: str) -> None:
    resource = component(render_yarn(conf(*GPU, f"taskmanager.memory.process.size={size}")))["resource"]
    assert resource["memory"] == mib


QUANTITIES = st.from_regex(
    r"[+-]?([0-9]{1,6}(\.[0-9]{0,4})?|\.[0-9]{1,4})(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9])?", fullmatch=True
)


@settings(max_examples=300, deadline=None)
@given(QUANTITIES)
def test_memory_is_read_as_the_kubernetes_client_reads_it(text: str) -> None:
    """Since YARN renders without the ``kubernetes`` client, accelflow's own quantity parser
    must agree with the client's ``parse_quantity``, which the Kubernetes renderer used."""
    size = parse_quantity(text)
    if 0 < size <= 1024**5 and size == int(size):
        assert memory_bytes(text) == int(size)
    else:
        with pytest.raises(ValueError):
            memory_bytes(text)


def test_several_resource_types_and_a_resource_without_a_yarn_key() -> None:
    service = render_yarn(
        conf(
            "external-resources=gpu;fpga;nic",
            "external-resource.gpu.amount=1",
            "external-resource.gpu.yarn.config-key=yarn.io/gpu",
            "external-resource.fpga.amount=2",
            "external-resource.fpga.yarn.config-key=yarn.io/fpga",
            "external-resource.nic.amount=1",
            "external-resource.nic.kubernetes.config-key=example.com/nic",
        )
    )
    assert component(service)["resource"]["additional"] == {
        "yarn.io/gpu": {"value": 1, "unit": ""},
        "yarn.io/fpga": {"value": 2, "unit": ""},
    }


def test_no_yarn_keys_means_no_additional_resources() -> None:
    resource = component(render_yarn(conf("external-resources=none")))["resource"]
    assert "additional" not in resource


def test_spark_names_are_documented_as_hints_not_applied() -> None:
    assert SPARK_YARN_RESOURCE_TYPES == {"gpu": "yarn.io/gpu", "fpga": "yarn.io/fpga"}
    resource = component(
        render_yarn(conf("external-resources=gpu", "external-resource.gpu.amount=1"))
    )["resource"]
    assert "additional" not in resource


def test_an_image_becomes_a_docker_artifact() -> None:
    comp = component(render_yarn(conf(*GPU), image="registry.example.com/accelflow:0.1.0"))
    assert comp["artifact"] == {"id": "registry.example.com/accelflow:0.1.0", "type": "DOCKER"}


def test_the_config_file_properties_reload_to_the_same_config() -> None:
    values: dict[str, Any] = {
        "external-resources": ["gpu", "fpga"],
        "external-resource.gpu.amount": 2,
        "external-resource.gpu.yarn.config-key": "yarn.io/gpu",
        "external-resource.gpu.kubernetes.node-selector": {"pool": "a100"},
        "external-resource.gpu.kubernetes.tolerations": [{"key": "gpu", "operator": "Exists"}],
        "external-resource.fpga.amount": 1,
        "external-resource.fpga.param.bitstream": "/opt/a.bit",
        "rest.enabled": True,
        "taskmanager.cpu.cores": 2,
    }
    original = config_from(values=values)
    properties = component(render_yarn(original))["configuration"]["files"][0]["properties"]
    assert all(isinstance(v, str) for v in properties.values())
    assert properties == yarn_properties(original.raw)
    reloaded = config_from(values=properties)
    assert reloaded.values == original.values
    assert reloaded.external_resources == original.external_resources


def test_the_cpu_must_be_whole_vcores() -> None:
    with pytest.raises(ConfigError, match="whole vcores") as info:
        render_yarn(conf(*GPU, "taskmanager.cpu.cores=0.5"))
    assert info.value.keys == ("taskmanager.cpu.cores",)
    service = render_yarn(conf(*GPU, "taskmanager.cpu.cores=0.5", "local.number-taskmanager=2"))
    assert component(service)["resource"]["cpus"] == 1


def test_a_bad_memory_size_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        render_yarn(conf(*GPU, "taskmanager.memory.process.size=2 GB"))
    assert info.value.keys == ("taskmanager.memory.process.size",)


@pytest.mark.parametrize("name", ["Train", "train_mnist", "9lives", "x" * 64, "taskexecutor"])
def test_invalid_service_names_are_refused_naming_the_key(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        render_yarn(conf(*GPU, f"yarn.application.name={name}"))
    assert info.value.keys == ("yarn.application.name",)


def test_a_valid_service_name_is_used() -> None:
    assert render_yarn(conf(*GPU, "yarn.application.name=train-mnist"))["name"] == "train-mnist"


def test_execution_target_ray_is_refused() -> None:
    with pytest.raises(DeploymentError, match="execution.target=ray"):
        render_yarn(conf(*GPU, "execution.target=ray"))
