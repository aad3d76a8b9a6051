"""Per-resource request decoration shared by the renderers: config entries, drivers, conflicts."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pytest

from accelflow import ConfigError, DeploymentError, DriverLoadError
from accelflow.config import Configuration, config_from
from accelflow.deploy import kubernetes_request, toleration_problem, yarn_request
from accelflow.resources import (
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    ExternalResourceInfo,
    KubernetesResources,
)


def conf(*definitions: str) -> Configuration:
    return config_from(definitions=definitions)


def gpu(*more: str, amount: int = 2) -> Configuration:
    return conf("external-resources=gpu", f"external-resource.gpu.amount={amount}", *more)


# -- test driver factories (loaded by import path, like any third-party driver) ----------------


class _Driver(ExternalResourceDriver):
    def retrieve_resource_info(self, amount: int) -> set[ExternalResourceInfo]:
        return {ExternalResourceInfo(index=str(i)) for i in range(amount)}


class PlainFactory(ExternalResourceDriverFactory):
    """Implements neither cluster-manager protocol."""

    def create_external_resource_driver(self, params: Mapping[str, str]) -> ExternalResourceDriver:
        return _Driver()


class DecoratingFactory(PlainFactory):
    """Asks for what its ``param.*`` keys say, per TaskExecutor, like a real driver would."""

    def kubernetes_resources(self, params: Mapping[str, str], amount: int) -> KubernetesResources:
        resources = {params.get("key", "example.com/fpga"): amount * int(params.get("per", "1"))}
        selector = {"example.com/fpga.model": params["model"]} if "model" in params else {}
        tolerations = [{"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"}]
        return KubernetesResources(
            resources=resources, node_selector=selector, tolerations=tolerations
        )

    def yarn_resources(self, params: Mapping[str, str], amount: int) -> Mapping[str, int]:
        return {params.get("yarn-key", "example.com/fpga"): amount * int(params.get("per", "1"))}


class BadValueFactory(PlainFactory):
    """Returns ``param.value`` evaluated as a Python literal, to exercise refusals."""

    def kubernetes_resources(self, params: Mapping[str, str], amount: int) -> KubernetesResources:
        return KubernetesResources(resources={"example.com/fpga": _value(params)})

    def yarn_resources(self, params: Mapping[str, str], amount: int) -> Mapping[str, Any]:
        return {"example.com/fpga": _value(params)}


def _value(params: Mapping[str, str]) -> Any:
    return {"1.5": 1.5, "0": 0, "-1": -1, "true": True, "3/2": Fraction(3, 2), "'2'": "2"}[
        params["value"]
    ]


class WrongTypeFactory(PlainFactory):
    def kubernetes_resources(self, params: Mapping[str, str], amount: int) -> Any:
        return {"example.com/fpga": amount}

    def yarn_resources(self, params: Mapping[str, str], amount: int) -> Any:
        return [("example.com/fpga", amount)]


class RaisingFactory(PlainFactory):
    def kubernetes_resources(self, params: Mapping[str, str], amount: int) -> KubernetesResources:
        if params.get("config-error"):
            raise ConfigError("must be a model name", key="external-resource.fpga.param.model")
        raise RuntimeError("device database unreachable")

    def yarn_resources(self, params: Mapping[str, str], amount: int) -> Mapping[str, int]:
        raise RuntimeError("device database unreachable")


def fpga(factory: str, *params: str, amount: int = 1) -> list[str]:
    return [
        f"external-resource.fpga.amount={amount}",
        f"external-resource.fpga.driver-factory.class={__name__}:{factory}",
        *(f"external-resource.fpga.param.{p}" for p in params),
    ]


def with_fpga(*definitions: str) -> Configuration:
    return conf("external-resources=fpga", *definitions)


# -- config entries ---------------------------------------------------------------------------


def test_amount_is_multiplied_by_the_taskexecutors_the_container_hosts() -> None:
    config = gpu(
        "external-resource.gpu.kubernetes.config-key=nvidia.com/gpu",
        "external-resource.gpu.yarn.config-key=yarn.io/gpu",
        "local.number-taskmanager=3",
    )
    assert kubernetes_request(config).resources == {"nvidia.com/gpu": 6}
    assert yarn_request(config) == {"yarn.io/gpu": 6}


def test_vendor_shorthand_names_the_extended_resource() -> None:
    assert kubernetes_request(gpu("external-resource.gpu.vendor=amd.com")).resources == {
        "amd.com/gpu": 2
    }


def test_several_resources_each_get_their_key() -> None:
    config = conf(
        "external-resources=gpu;fpga",
        "external-resource.gpu.amount=1",
        "external-resource.gpu.vendor=nvidia.com",
        "external-resource.fpga.amount=2",
        "external-resource.fpga.kubernetes.config-key=xilinx.com/fpga",
        "external-resource.fpga.yarn.config-key=yarn.io/fpga",
    )
    assert dict(kubernetes_request(config).resources) == {"nvidia.com/gpu": 1, "xilinx.com/fpga": 2}
    assert yarn_request(config) == {"yarn.io/fpga": 2}


def test_gpu_product_shorthand_and_node_selector_are_merged() -> None:
    config = gpu(
        "external-resource.gpu.vendor=nvidia.com",
        "external-resource.gpu.kubernetes.gpu-product=NVIDIA-A100-SXM4-80GB",
        "external-resource.gpu.kubernetes.node-selector=cloud.google.com/gke-spot=true",
    )
    assert kubernetes_request(config).node_selector == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "cloud.google.com/gke-spot": "true",
    }


def test_gpu_product_contradicting_the_node_selector_is_refused() -> None:
    config = gpu(
        "external-resource.gpu.kubernetes.gpu-product=NVIDIA-A100-SXM4-80GB",
        "external-resource.gpu.kubernetes.node-selector=nvidia.com/gpu.product=Tesla-T4",
    )
    with pytest.raises(ConfigError) as info:
        kubernetes_request(config)
    assert info.value.keys == ("external-resource.gpu.kubernetes.gpu-product",)
    assert "Tesla-T4" in str(info.value) and "node-selector" in str(info.value)


def test_two_resources_disagreeing_on_a_label_is_a_config_error_naming_both() -> None:
    config = conf(
        "external-resources=gpu;fpga",
        "external-resource.gpu.amount=1",
        "external-resource.gpu.kubernetes.node-selector=pool=gpu",
        "external-resource.fpga.amount=1",
        "external-resource.fpga.kubernetes.node-selector=pool=fpga",
    )
    with pytest.raises(ConfigError) as info:
        kubernetes_request(config)
    message = str(info.value)
    assert "external-resource.gpu.kubernetes.node-selector" in message
    assert "external-resource.fpga.kubernetes.node-selector" in message
    assert "'gpu'" in message and "'fpga'" in message


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [("bad key!=x", "label key"), ("pool=has space", "label value"), ("-x.io/a=b", "prefix")],
)
def test_invalid_node_selector_labels_are_refused(selector: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        kubernetes_request(gpu(f"external-resource.gpu.kubernetes.node-selector={selector}"))
    assert info.value.keys == ("external-resource.gpu.kubernetes.node-selector",)
    assert fragment in str(info.value)


def test_tolerations_are_kept_and_duplicates_dropped() -> None:
    toleration = '{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}'
    config = conf(
        "external-resources=gpu;fpga",
        "external-resource.gpu.amount=1",
        f"external-resource.gpu.kubernetes.tolerations=[{toleration}]",
        "external-resource.fpga.amount=1",
        f"external-resource.fpga.kubernetes.tolerations=[{toleration}, "
        '{"key": "spot", "value": "true", "effect": "NoExecute", "tolerationSeconds": 60}]',
    )
    assert kubernetes_request(config).tolerations == (
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "value": "true", "effect": "NoExecute", "tolerationSeconds": 60},
    )


@pytest.mark.parametrize(
    ("toleration", "fragment"),
    [
        ('"gpu"', "expected an object"),
        ('{"key": "a", "opperator": "Exists"}', "unknown field(s) 'opperator'"),
        ('{"key": "a", "operator": "Maybe"}', "operator 'Maybe'"),
        ('{"key": "a", "operator": "Exists", "value": "x"}', "takes no value"),
        ('{"value": "x"}', "without a key"),
        ('{"key": "a", "effect": "NoRun"}', "effect 'NoRun'"),
        ('{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}', "only applies"),
        ('{"key": "a", "effect": "NoExecute", "tolerationSeconds": "5"}', "whole number"),
        ('{"key": 3}', "key must be a string"),
        ('{"key": "a b"}', "label key"),
    ],
)
def test_invalid_tolerations_are_refused_naming_the_key(toleration: str, fragment: str) -> None:
    config = gpu(f"external-resource.gpu.kubernetes.tolerations=[{toleration}]")
    with pytest.raises(ConfigError) as info:
        kubernetes_request(config)
    assert info.value.keys == ("external-resource.gpu.kubernetes.tolerations",)
    assert "toleration 1" in str(info.value) and fragment in str(info.value)


def test_toleration_problem_accepts_valid_ones() -> None:
    assert toleration_problem({"operator": "Exists"}) is None
    assert toleration_problem({"key": "k", "operator": "Equal", "value": "v"}) is None


def test_a_resource_without_a_cluster_key_is_not_requested_and_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="accelflow.deploy"):
        assert kubernetes_request(gpu()).resources == {}
        assert yarn_request(gpu()) == {}
    messages = [r.getMessage() for r in caplog.records]
    assert any("external-resource.gpu.kubernetes.config-key" in m for m in messages)
    assert any("external-resource.gpu.yarn.config-key" in m and "yarn.io/gpu" in m for m in messages)


# -- drivers ----------------------------------------------------------------------------------


def test_a_driver_decorator_adds_resources_labels_and_tolerations() -> None:
    config = with_fpga(*fpga("DecoratingFactory", "model=u250", "per=2", amount=2),
                       "local.number-taskmanager=2")
    request = kubernetes_request(config)
    assert request.resources == {"example.com/fpga": 8}
    assert request.node_selector == {"example.com/fpga.model": "u250"}
    assert request.tolerations == (
        {"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"},
    )
    assert yarn_request(config) == {"example.com/fpga": 8}


def test_a_driver_agreeing_with_the_config_is_merged_once() -> None:
    config = with_fpga(
        *fpga("DecoratingFactory", amount=2),
        "external-resource.fpga.kubernetes.config-key=example.com/fpga",
        "external-resource.fpga.yarn.config-key=example.com/fpga",
    )
    assert kubernetes_request(config).resources == {"example.com/fpga": 2}
    assert yarn_request(config) == {"example.com/fpga": 2}


def test_a_driver_conflicting_with_the_config_quantity_names_both() -> None:
    config = with_fpga(
        *fpga("DecoratingFactory", "per=2", amount=1),
        "external-resource.fpga.kubernetes.config-key=example.com/fpga",
        "external-resource.fpga.yarn.config-key=example.com/fpga",
    )
    for render in (kubernetes_request, yarn_request):
        with pytest.raises(DeploymentError) as info:
            render(config)
        message = str(info.value)
        assert "example.com/fpga" in message and "1" in message and "2" in message
        assert "external-resource.fpga.driver-factory.class" in message
        assert f"{__name__}:DecoratingFactory" in message
        assert ("external-resource.fpga.kubernetes.config-key" in message) or (
            "external-resource.fpga.yarn.config-key" in message
        )


def test_a_driver_conflicting_with_a_config_label_names_both() -> None:
    config = with_fpga(
        *fpga("DecoratingFactory", "model=u250"),
        "external-resource.fpga.kubernetes.node-selector=example.com/fpga.model=u280",
    )
    with pytest.raises(DeploymentError) as info:
        kubernetes_request(config)
    message = str(info.value)
    assert "u250" in message and "u280" in message
    assert "external-resource.fpga.kubernetes.node-selector" in message
    assert "driver-factory.class" in message


def test_a_driver_conflicting_with_another_resource_is_refused() -> None:
    config = conf(
        "external-resources=gpu;fpga",
        "external-resource.gpu.amount=1",
        "external-resource.gpu.kubernetes.config-key=example.com/fpga",
        *fpga("DecoratingFactory", amount=3),
    )
    with pytest.raises(DeploymentError, match="external-resource.gpu.kubernetes.config-key"):
        kubernetes_request(config)


@pytest.mark.parametrize("value", ["1.5", "0", "-1", "true", "3/2", "'2'"])
def test_a_driver_quantity_that_is_not_a_positive_int_is_refused(value: str) -> None:
    config = with_fpga(*fpga("BadValueFactory", f"value={value}"))
    for render in (kubernetes_request, yarn_request):
        with pytest.raises(DeploymentError, match="positive whole number") as info:
            render(config)
        assert "example.com/fpga" in str(info.value)
        assert "BadValueFactory" in str(info.value)


def test_a_driver_resource_name_that_kubernetes_rejects_is_refused() -> None:
    config = with_fpga(*fpga("DecoratingFactory", "key=gpu", "yarn-key=9gpu"))
    with pytest.raises(DeploymentError, match="resource name 'gpu'.*vendor-domain"):
        kubernetes_request(config)
    with pytest.raises(DeploymentError, match="resource name '9gpu'.*not a YARN resource type"):
        yarn_request(config)


def test_a_driver_returning_the_wrong_type_is_refused() -> None:
    config = with_fpga(*fpga("WrongTypeFactory"))
    with pytest.raises(DeploymentError, match="must return accelflow.resources.KubernetesResources"):
        kubernetes_request(config)
    with pytest.raises(DeploymentError, match="must return a mapping"):
        yarn_request(config)


def test_a_driver_that_raises_is_reported_with_its_name() -> None:
    config = with_fpga(*fpga("RaisingFactory"))
    for render in (kubernetes_request, yarn_request):
        with pytest.raises(DeploymentError, match="RuntimeError: device database unreachable") as info:
            render(config)
        assert "RaisingFactory" in str(info.value)
        assert isinstance(info.value.__cause__, RuntimeError)


def test_a_driver_config_error_passes_through() -> None:
    config = with_fpga(*fpga("RaisingFactory", "config-error=1"))
    with pytest.raises(ConfigError) as info:
        kubernetes_request(config)
    assert info.value.keys == ("external-resource.fpga.param.model",)


def test_a_factory_without_the_protocols_adds_nothing() -> None:
    config = with_fpga(
        *fpga("PlainFactory", amount=2),
        "external-resource.fpga.kubernetes.config-key=example.com/fpga",
    )
    assert kubernetes_request(config).resources == {"example.com/fpga": 2}


def test_a_factory_that_cannot_be_loaded_is_the_registry_error() -> None:
    config = with_fpga(
        "external-resource.fpga.amount=1",
        "external-resource.fpga.driver-factory.class=no_such_module_xyz:Factory",
    )
    with pytest.raises(DriverLoadError) as info:
        kubernetes_request(config)
    assert info.value.key == "external-resource.fpga.driver-factory.class"
