"""``accelflow render kubernetes -D execution.target=ray``: a KubeRay RayCluster, checked
against the RayCluster CRD schema kept as test data, with pod templates checked as core/v1."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from accelflow import ConfigError, DeploymentError
from accelflow.cli._main import main as cli_main
from accelflow.config import config_from
from accelflow.deploy import render_kubernetes

CRD = yaml.safe_load((Path(__file__).parent / "data" / "raycluster-crd-subset.yaml").read_text(encoding="utf-8"))
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
VERSION = kubernetes_validate.utils.latest_version()
RAY_GPU = (
    "execution.target=ray",
    "ray.number-taskmanager=3",
    "taskmanager.numberOfTaskSlots=2",
    "external-resources=gpu;fpga",
    "external-resource.gpu.amount=2",
    "external-resource.gpu.driver-factory.class=gpu",
    "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu",
    "external-resource.gpu.kubernetes.gpu-product=NVIDIA-A100-SXM4-80GB",
    "external-resource.fpga.amount=1",
    "external-resource.fpga.kubernetes.config-key=xilinx.com/fpga",
    "external-resource.fpga.ray.resource-name=xilinx_fpga",
)


def _validate(documents: list[dict[str, Any]]) -> dict[str, Any]:
    config_map, cluster = documents
    kubernetes_validate.validate(config_map, VERSION, strict=True)
    jsonschema.validate(cluster, SCHEMA)
    spec = cluster["spec"]
    for template in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]:
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
            VERSION, strict=True,
        )
    return cluster


def test_worker_group_requests_and_advertises_one_taskexecutor_each() -> None:
    cluster = _validate(render_kubernetes(config_from(definitions=list(RAY_GPU))))
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    (container,) = group["template"]["spec"]["containers"]
    expected = {"cpu": "2", "memory": container["resources"]["requests"]["memory"],
                "nvidia.com/gpu": "2", "xilinx.com/fpga": "1"}
    assert container["resources"]["requests"] == container["resources"]["limits"] == expected
    assert group["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    params = group["rayStartParams"]
    assert params["num-cpus"] == "2" and params["num-gpus"] == "2"
    assert json.loads(json.loads(params["resources"])) == {"xilinx_fpga": 1}
    # what ray start receives from KubeRay: one shell word holding the JSON object
    assert shlex.split(f"--resources={params['resources']}") == ['--resources={"xilinx_fpga": 1}']


def test_the_head_schedules_no_actor_and_holds_the_config() -> None:
    config_map, cluster = render_kubernetes(config_from(definitions=list(RAY_GPU)))
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0" and head["rayStartParams"]["num-gpus"] == "0"
    (container,) = head["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    (volume,) = head["template"]["spec"]["volumes"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert "external-resource.gpu.amount: '2'" in config_map["data"]["accelflow-conf.yaml"]


def test_a_cluster_without_external_resources_is_valid() -> None:
    cluster = _validate(render_kubernetes(config_from(definitions=["execution.target=ray"])))
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert group["rayStartParams"] == {"num-cpus": "1"}


def test_the_schema_catches_a_broken_cluster() -> None:
    """The kept schema is strict enough to matter: a worker group without its name fails."""
    _, cluster = render_kubernetes(config_from(definitions=list(RAY_GPU)))
    del cluster["spec"]["workerGroupSpecs"][0]["groupName"]
    with pytest.raises(jsonschema.ValidationError, match="groupName"):
        jsonschema.validate(cluster, SCHEMA)
    cluster["spec"]["workerGroupSpecs"][0].update(groupName="g", rayStartParams={"num-gpus": 2})
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'string'"):
        jsonschema.validate(cluster, SCHEMA)


def test_a_pod_template_file_is_refused_for_ray(tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text("apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n", encoding="utf-8")
    config = config_from(definitions=["execution.target=ray", f"kubernetes.pod-template-file={template}"])
    with pytest.raises(DeploymentError, match="kubernetes.pod-template-file: .*not implemented yet"):
        render_kubernetes(config)


def test_a_bad_name_is_still_named() -> None:
    with pytest.raises(ConfigError, match="kubernetes.job-name"):
        render_kubernetes(config_from(definitions=["execution.target=ray", "kubernetes.job-name=Bad_Name"]))


def test_the_cli_renders_the_ray_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["render", "kubernetes"] + [a for d in RAY_GPU for a in ("-D", d)]
    assert cli_main(args) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == ["ConfigMap", "RayCluster"]
    _validate(documents)
