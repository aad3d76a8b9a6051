"""``render_kubernetes``: schema-valid manifests, requests == limits, cpu/memory, names."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import kubernetes_validate
import pytest
import yaml

from accelflow import ConfigError, MissingDependencyError
from accelflow.cli._main import build_parser
from accelflow.config import Configuration, config_from
from accelflow.deploy import (
    CONTAINER_NAME,
    DEFAULT_IMAGE,
    DEFAULT_JOB_PATH,
    KUBERNETES_RENDERERS,
    dump_yaml,
    render_kubernetes,
)

VERSION = kubernetes_validate.utils.latest_version()
GPU = (
    "external-resources=gpu",
    "external-resource.gpu.amount=2",
    "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu",
)


def conf(*definitions: str) -> Configuration:
    return config_from(definitions=definitions)


def render(*definitions: str, **options: Any) -> list[dict[str, Any]]:
    documents = render_kubernetes(conf(*definitions), **options)
    for document in documents:
        kubernetes_validate.validate(document, VERSION, strict=True)
    return documents


def job_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [d for d in documents if d["kind"] == "Job"]
    return job


def container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = job_of(documents)["spec"]["template"]["spec"]["containers"]
    (main,) = [c for c in containers if c["name"] == CONTAINER_NAME]
    return main


def resources(documents: list[dict[str, Any]]) -> Mapping[str, str]:
    res = container(documents)["resources"]
    assert res["requests"] == res["limits"]
    return res["limits"]  # type: ignore[no-any-return]


def test_the_done_when_config_asks_for_two_gpus_in_requests_and_limits() -> None:
    documents = render(*GPU)
    assert [d["kind"] for d in documents] == ["ConfigMap", "Job"]
    assert job_of(documents)["apiVersion"] == "batch/v1"
    res = container(documents)["resources"]
    assert res["requests"]["nvidia.com/gpu"] == "2"
    assert res["limits"]["nvidia.com/gpu"] == "2"


def test_accelflow_run_reads_the_rendered_args_as_its_own_options() -> None:
    """``--conf`` after the script would be handed to the script and the config dropped."""
    args = build_parser().parse_args(container(render(*GPU, job="/app/train.py"))["args"])
    assert (args.conf, args.script, args.args) == (
        "/etc/accelflow/accelflow-conf.yaml", "/app/train.py", []
    )


def test_the_container_runs_accelflow_run_with_the_mounted_config() -> None:
    documents = render(*GPU, job="/app/train.py")
    main = container(documents)
    assert main["command"] == ["accelflow"]
    assert main["args"] == ["run", "--conf", "/etc/accelflow/accelflow-conf.yaml", "/app/train.py"]
    assert main["image"] == DEFAULT_IMAGE
    (mount,) = main["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/accelflow", True)
    pod = job_of(documents)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == documents[0]["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    assert job_of(documents)["spec"]["backoffLimit"] == 0


def test_the_default_job_path_is_inside_the_image() -> None:
    assert container(render(*GPU))["args"][-1] == DEFAULT_JOB_PATH


def test_the_config_map_reloads_to_the_same_config() -> None:
    definitions = (
        *GPU,
        "external-resource.gpu.kubernetes.gpu-product=NVIDIA-A100-SXM4-80GB",
        'external-resource.gpu.kubernetes.tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]',
        "local.number-taskmanager=2",
        "scheduler.placement-policy=spread",
    )
    config_map = render(*definitions)[0]
    text = config_map["data"]["accelflow-conf.yaml"]
    reloaded = config_from(values=yaml.safe_load(text))
    original = conf(*definitions)
    assert reloaded.values == original.values
    assert reloaded.external_resources == original.external_resources


def test_python_api_values_yaml_cannot_write_reach_the_config_map_as_text() -> None:
    original = config_from(values={"taskmanager.cpu.cores": Fraction(1, 2), **dict(
        d.split("=", 1) for d in GPU
    )})
    config_map = render_kubernetes(original)[0]
    reloaded = config_from(values=yaml.safe_load(config_map["data"]["accelflow-conf.yaml"]))
    assert reloaded.values == original.values


def test_everything_is_multiplied_by_the_taskexecutors_in_the_pod() -> None:
    limits = resources(
        render(
            *GPU,
            "local.number-taskmanager=3",
            "taskmanager.numberOfTaskSlots=2",
            "taskmanager.memory.process.size=2Gi",
        )
    )
    assert limits == {"cpu": "6", "memory": "6Gi", "nvidia.com/gpu": "6"}


@pytest.mark.parametrize(
    ("cores", "taskexecutors", "expected"),
    [("0.5", 3, "1500m"), ("1/4", 1, "250m"), ("2", 2, "4"), ("0.25", 4, "1")],
)
def test_cpu_quantities(cores: str, taskexecutors: int, expected: str) -> None:
    limits = resources(
        render(*GPU, f"taskmanager.cpu.cores={cores}", f"local.number-taskmanager={taskexecutors}")
    )
    assert limits["cpu"] == expected


def test_cpu_finer_than_a_millicore_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        render_kubernetes(conf(*GPU, "taskmanager.cpu.cores=1/3"))
    assert info.value.keys == ("taskmanager.cpu.cores",)
    assert "millicores" in str(info.value)


@pytest.mark.parametrize(
    ("size", "taskexecutors", "expected"),
    [("512Mi", 3, "1536Mi"), ("2G", 2, "4G"), ("1.5Gi", 1, "1536Mi"), ("1000", 1, "1k"), ("3", 1, "3")],
)
def test_memory_quantities(size: str, taskexecutors: int, expected: str) -> None:
    limits = resources(
        render(*GPU, f"taskmanager.memory.process.size={size}", f"local.number-taskmanager={taskexecutors}")
    )
    assert limits["memory"] == expected


@pytest.mark.parametrize(
    ("size", "fragment"),
    [
        ("2GB", "not a Kubernetes quantity"),
        ("2g", "not a Kubernetes quantity"),
        ("lots", "not a Kubernetes quantity"),
        ("0", "must be positive"),
        ("-1Gi", "must be positive"),
        ("500m", "did you mean 'Mi'"),
    ],
)
def test_bad_memory_sizes_are_refused_naming_the_key(size: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        render_kubernetes(conf(*GPU, f"taskmanager.memory.process.size={size}"))
    assert info.value.keys == ("taskmanager.memory.process.size",)
    assert fragment in str(info.value) and repr(size) in str(info.value)


def test_node_selector_gpu_product_and_tolerations_reach_the_pod() -> None:
    documents = render(
        *GPU,
        "external-resource.gpu.kubernetes.gpu-product=NVIDIA-H100-80GB-HBM3",
        "external-resource.gpu.kubernetes.node-selector=topology.kubernetes.io/zone=eu-west1-b",
        'external-resource.gpu.kubernetes.tolerations=[{"key": "nvidia.com/gpu", '
        '"operator": "Exists", "effect": "NoSchedule"}, {"key": "spot", "operator": "Equal", '
        '"value": "true", "effect": "NoExecute", "tolerationSeconds": 30}]',
    )
    pod = job_of(documents)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "topology.kubernetes.io/zone": "eu-west1-b",
    }
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute",
         "tolerationSeconds": 30},
    ]


def test_vendor_shorthand_and_several_resources() -> None:
    limits = resources(
        render(
            "external-resources=gpu;fpga;nic",
            "external-resource.gpu.amount=1",
            "external-resource.gpu.vendor=amd.com",
            "external-resource.fpga.amount=2",
            "external-resource.fpga.kubernetes.config-key=xilinx.com/fpga",
            "external-resource.nic.amount=1",
        )
    )
    assert limits == {"cpu": "1", "memory": "1Gi", "amd.com/gpu": "1", "xilinx.com/fpga": "2"}


def test_names_namespace_and_image_come_from_the_config() -> None:
    documents = render(
        *GPU,
        "kubernetes.job-name=train-mnist",
        "kubernetes.namespace=ml",
        "kubernetes.container.image=registry.example.com/ml/accelflow:1.2",
    )
    config_map, job = documents
    assert job["metadata"]["name"] == "train-mnist"
    assert config_map["metadata"]["name"] == "train-mnist-conf"
    assert {d["metadata"]["namespace"] for d in documents} == {"ml"}
    assert container(documents)["image"] == "registry.example.com/ml/accelflow:1.2"


def test_the_image_option_wins_over_the_config() -> None:
    documents = render(*GPU, "kubernetes.container.image=a:1", image="b:2")
    assert container(documents)["image"] == "b:2"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("kubernetes.job-name", "Train_MNIST"),
        ("kubernetes.job-name", "x" * 64),
        ("kubernetes.namespace", "ml.team"),
    ],
)
def test_invalid_names_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        render_kubernetes(conf(*GPU, f"{key}={value}"))
    assert info.value.keys == (key,)


@pytest.mark.parametrize(("option", "value"), [("job", " "), ("image", "a b"), ("image", "")])
def test_invalid_options_are_refused_naming_the_argument(option: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        render_kubernetes(conf(*GPU), **{option: value})
    assert info.value.keys == (f"--{option}",)


def test_no_external_resources_renders_cpu_and_memory_only() -> None:
    assert resources(render()) == {"cpu": "1", "memory": "1Gi"}


def test_execution_target_ray_renders_a_raycluster() -> None:
    # (issue 7: the placeholder error became the KubeRay renderer; details in tests/ray)
    assert set(KUBERNETES_RENDERERS) == {"local", "ray"}
    kinds = [d["kind"] for d in render_kubernetes(conf(*GPU, "execution.target=ray"))]
    assert kinds == ["ConfigMap", "RayCluster"]


def test_a_missing_kubernetes_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(MissingDependencyError) as info:
        render_kubernetes(conf(*GPU))
    assert info.value.extra == "kubernetes"
    assert "accelflow render kubernetes" in str(info.value)
    assert "pip install 'accelflow[kubernetes]'" in str(info.value)


def test_dump_yaml_round_trips_every_document() -> None:
    documents = render(*GPU)
    text = dump_yaml(documents)
    assert list(yaml.safe_load_all(text)) == documents
    assert "accelflow-conf.yaml: |" in text
