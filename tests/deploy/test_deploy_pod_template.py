"""Merging a user pod template (``kubernetes.pod-template-file``) with documented precedence."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from accelflow import ConfigError
from accelflow.config import config_from
from accelflow.deploy import CONTAINER_NAME, DEFAULT_IMAGE, load_pod_template, render_kubernetes

VERSION = kubernetes_validate.utils.latest_version()
GPU = (
    "external-resources=gpu",
    "external-resource.gpu.amount=2",
    "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu",
)

USER_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "ignored",
        "namespace": "ignored",
        "labels": {"team": "vision", "app.kubernetes.io/name": "mine"},
        "annotations": {"owner": "ml@example.com"},
    },
    "spec": {
        "serviceAccountName": "trainer",
        "restartPolicy": "OnFailure",
        "nodeSelector": {"pool": "gpu", "nvidia.com/gpu.product": "Tesla-T4"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "mnist"}}],
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
        "containers": [
            {"name": "log-shipper", "image": "fluent-bit:3"},
            {
                "name": CONTAINER_NAME,
                "image": "registry.example.com/vision:7",
                "command": ["sleep"],
                "args": ["infinity"],
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                "securityContext": {"runAsNonRoot": True},
                "resources": {
                    "requests": {"cpu": "3", "memory": "8Gi", "nvidia.com/gpu": "1",
                                 "ephemeral-storage": "10Gi"},
                    "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
        ],
    },
}


def write(tmp_path: Path, data: Any, name: str = "pod.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def render_with(path: Path, *definitions: str, image: str | None = None) -> list[dict[str, Any]]:
    config = config_from(
        definitions=[*GPU, f"kubernetes.pod-template-file={path}", *definitions]
    )
    documents = render_kubernetes(config, image=image)
    for document in documents:
        kubernetes_validate.validate(document, VERSION, strict=True)
    return documents


def template_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    template: dict[str, Any] = documents[1]["spec"]["template"]
    return template


def main_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = template_of(documents)["spec"]["containers"]
    (main,) = [c for c in containers if c["name"] == CONTAINER_NAME]
    return main


def test_user_settings_are_kept_and_ours_win_where_documented(tmp_path: Path) -> None:
    documents = render_with(write(tmp_path, USER_POD))
    template = template_of(documents)
    meta, spec = template["metadata"], template["spec"]
    assert "name" not in meta and "namespace" not in meta
    assert meta["labels"]["team"] == "vision"
    assert meta["labels"]["app.kubernetes.io/name"] == "mine"  # the user wins on labels
    assert meta["labels"]["app.kubernetes.io/instance"] == "accelflow-job"
    assert meta["annotations"] == {
        "kubectl.kubernetes.io/default-container": CONTAINER_NAME,
        "owner": "ml@example.com",
    }
    assert spec["serviceAccountName"] == "trainer"
    assert spec["restartPolicy"] == "OnFailure"
    assert spec["initContainers"] == USER_POD["spec"]["initContainers"]
    assert [c["name"] for c in spec["containers"]] == ["log-shipper", CONTAINER_NAME]
    assert spec["containers"][0] == USER_POD["spec"]["containers"][0]
    assert [v["name"] for v in spec["volumes"]] == ["data", "accelflow-conf"]


def test_the_main_container_keeps_user_fields_but_takes_our_command(tmp_path: Path) -> None:
    main = main_of(render_with(write(tmp_path, USER_POD)))
    assert main["image"] == "registry.example.com/vision:7"  # no image in the config
    assert main["command"] == ["accelflow"] and main["args"][0] == "run"
    assert main["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]
    assert main["securityContext"] == {"runAsNonRoot": True}
    assert [m["mountPath"] for m in main["volumeMounts"]] == ["/data", "/etc/accelflow"]


def test_our_extended_resources_win_and_unset_cpu_memory_keep_the_template(tmp_path: Path) -> None:
    res = main_of(render_with(write(tmp_path, USER_POD)))["resources"]
    assert res["requests"] == {
        "cpu": "3", "memory": "8Gi", "nvidia.com/gpu": "2", "ephemeral-storage": "10Gi"
    }
    # the template set only a memory limit: cpu stays without a limit, as the user wrote it
    assert res["limits"] == {"memory": "8Gi", "nvidia.com/gpu": "2"}
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"]


def test_cpu_and_memory_set_in_the_config_win(tmp_path: Path) -> None:
    res = main_of(
        render_with(
            write(tmp_path, USER_POD),
            "taskmanager.cpu.cores=2",
            "taskmanager.memory.process.size=4Gi",
        )
    )["resources"]
    for kind in ("requests", "limits"):
        assert (res[kind]["cpu"], res[kind]["memory"]) == ("2", "4Gi")
    assert res["requests"]["ephemeral-storage"] == "10Gi"


def test_image_from_the_config_or_option_wins_over_the_template(tmp_path: Path) -> None:
    path = write(tmp_path, USER_POD)
    assert main_of(render_with(path, "kubernetes.container.image=a:1"))["image"] == "a:1"
    assert main_of(render_with(path, "kubernetes.container.image=a:1", image="b:2"))["image"] == "b:2"


def test_node_selectors_merge_with_ours_winning_per_label(tmp_path: Path) -> None:
    documents = render_with(
        write(tmp_path, USER_POD),
        "external-resource.gpu.kubernetes.gpu-product=NVIDIA-A100-SXM4-80GB",
    )
    assert template_of(documents)["spec"]["nodeSelector"] == {
        "pool": "gpu",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    }


def test_tolerations_are_appended_without_duplicates(tmp_path: Path) -> None:
    documents = render_with(
        write(tmp_path, USER_POD),
        'external-resource.gpu.kubernetes.tolerations=[{"key": "nvidia.com/gpu", '
        '"operator": "Exists", "effect": "NoSchedule"}, {"key": "spot", "operator": "Exists"}]',
    )
    assert template_of(documents)["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ]


def test_a_template_without_our_container_gets_it_first(tmp_path: Path) -> None:
    pod = {"kind": "Pod", "spec": {"containers": [{"name": "sidecar", "image": "envoy:1"}]}}
    documents = render_with(write(tmp_path, pod))
    containers = template_of(documents)["spec"]["containers"]
    assert [c["name"] for c in containers] == [CONTAINER_NAME, "sidecar"]
    assert containers[0]["image"] == DEFAULT_IMAGE
    assert containers[0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert template_of(documents)["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    "document",
    [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
         "template": {"metadata": {"labels": {"team": "x"}}, "spec": {"hostIPC": False}}},
        {"metadata": {"labels": {"team": "x"}}, "spec": {"hostIPC": False}},
    ],
)
def test_pod_template_and_bare_template_spec_forms(tmp_path: Path, document: dict[str, Any]) -> None:
    template = template_of(render_with(write(tmp_path, document)))
    assert template["metadata"]["labels"]["team"] == "x"
    assert template["spec"]["hostIPC"] is False


def test_fields_unknown_to_the_client_survive(tmp_path: Path) -> None:
    pod = copy.deepcopy(USER_POD)
    pod["spec"]["futureField"] = {"enabled": True}
    config = config_from(definitions=[*GPU, f"kubernetes.pod-template-file={write(tmp_path, pod)}"])
    assert render_kubernetes(config)[1]["spec"]["template"]["spec"]["futureField"] == {"enabled": True}


def test_the_template_file_is_not_modified(tmp_path: Path) -> None:
    path = write(tmp_path, USER_POD)
    before = path.read_bytes()
    render_with(path)
    assert path.read_bytes() == before
    assert load_pod_template(str(path))["spec"] == USER_POD["spec"]


def _refusal(tmp_path: Path, content: Any) -> str:
    path = write(tmp_path, content)
    config = config_from(definitions=[*GPU, f"kubernetes.pod-template-file={path}"])
    with pytest.raises(ConfigError) as info:
        render_kubernetes(config)
    assert info.value.keys == ("kubernetes.pod-template-file",)
    message = str(info.value)
    assert str(path) in message and "(from -D)" in message
    return message


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("kind: Pod\nspec: [\n", ("line", "not valid YAML")),
        ("- a\n- b\n", ("expected a mapping",)),
        ("", ("empty",)),
        ({"kind": "Deployment", "spec": {}}, ("kind", "'Deployment'")),
        ({"kind": "Pod", "containers": []}, ("'metadata' and 'spec'",)),
        ({"kind": "Pod", "spec": {"containers": {"name": "x"}}}, ("spec.containers", "expected a list")),
        ({"kind": "Pod", "spec": {"containers": ["x"]}}, ("spec.containers[0]", "expected a mapping")),
        ({"kind": "Pod", "spec": {"containers": [{"image": "x"}]}}, ("spec.containers[0].name",)),
        (
            {"kind": "Pod", "spec": {"containers": [{"name": "a", "resources": {"limits": "2"}}]}},
            ("spec.containers[0].resources.limits",),
        ),
        ({"kind": "Pod", "spec": {"nodeSelector": ["a"]}}, ("spec.nodeSelector",)),
        ({"kind": "Pod", "spec": {"restartPolicy": "Always"}}, ("spec.restartPolicy", "Never or OnFailure")),
        (
            {"kind": "Pod", "spec": {"volumes": [{"name": "accelflow-conf", "emptyDir": {}}]}},
            ("spec.volumes", "'accelflow-conf'", "reserved"),
        ),
        (
            {"kind": "Pod", "spec": {"containers": [{"name": CONTAINER_NAME,
             "volumeMounts": [{"name": "etc", "mountPath": "/etc/accelflow"}]}]}},
            ("spec.containers[0].volumeMounts", "mountPath '/etc/accelflow'"),
        ),
    ],
)
def test_bad_templates_are_refused_naming_file_and_field(
    tmp_path: Path, content: Any, fragments: tuple[str, ...]
) -> None:
    message = _refusal(tmp_path, content)
    for fragment in fragments:
        assert fragment in message


def test_a_missing_template_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    config = config_from(definitions=[*GPU, f"kubernetes.pod-template-file={path}"])
    with pytest.raises(ConfigError, match="cannot read the pod template") as info:
        render_kubernetes(config)
    assert str(path) in str(info.value)
