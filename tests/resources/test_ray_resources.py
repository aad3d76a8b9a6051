"""The optional Ray decorator protocol (issue 15): factories, not a list of names, decide what
a TaskExecutor actor asks Ray for."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelflow import DeploymentError
from accelflow.config import ExternalResourceSpec, config_from
from accelflow.resources import (
    RayResourceDecorator,
    RayResources,
    ray_accelerator_env,
    ray_resources_of,
)
from accelflow.resources.gpu import GPUDriverFactory
from accelflow.runtime.launchers import actor_resources

THIRD_PARTY = '''
from accelflow.resources import (
    ExternalResourceDriver, ExternalResourceDriverFactory, ExternalResourceInfo, RayResources)

class Driver(ExternalResourceDriver):
    def retrieve_resource_info(self, amount):
        return {ExternalResourceInfo(index=str(i)) for i in range(amount)}

class AcmeGPUFactory(ExternalResourceDriverFactory):
    """A third-party GPU driver: Ray should hand it GPUs."""
    def create_external_resource_driver(self, params):
        return Driver()
    def ray_resources(self, params, amount):
        return RayResources(num_gpus=amount, accelerator_ids_env="ACME_RAY_GPU_IDS")

class PlainFactory(ExternalResourceDriverFactory):
    """No Ray protocol: its resource is a Ray custom resource."""
    def create_external_resource_driver(self, params):
        return Driver()

class TPUFactory(ExternalResourceDriverFactory):
    def create_external_resource_driver(self, params):
        return Driver()
    def ray_resources(self, params, amount):
        return RayResources(resources={"TPU": amount * 4}, accelerator_ids_env="ACME_TPU_IDS",
                            accelerator="TPU")

class Broken(ExternalResourceDriverFactory):
    def create_external_resource_driver(self, params):
        return Driver()
    def ray_resources(self, params, amount):
        return {"num_gpus": amount}
'''


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "acme_ray_drivers.py").write_text(THIRD_PARTY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "acme_ray_drivers"
    sys.modules.pop("acme_ray_drivers", None)


def conf(**resources: tuple[str | None, int]) -> dict[str, object]:
    values: dict[str, object] = {"external-resources": ";".join(resources), "taskmanager.numberOfTaskSlots": 2}
    for name, (factory, amount) in resources.items():
        values[f"external-resource.{name}.amount"] = amount
        if factory is not None:
            values[f"external-resource.{name}.driver-factory.class"] = factory
    return values


def test_a_third_party_factory_with_the_protocol_gets_num_gpus(acme: str) -> None:
    config = config_from(values=conf(gpu=(f"{acme}:AcmeGPUFactory", 2)))

    assert actor_resources(config) == {"num_cpus": 2, "num_gpus": 2, "resources": {}}


def test_a_factory_without_the_protocol_gets_a_custom_resource(acme: str) -> None:
    config = config_from(values={
        **conf(gpu=(f"{acme}:PlainFactory", 2), fpga=(None, 1)),
        "external-resource.fpga.ray.resource-name": "acme_fpga",
    })

    assert actor_resources(config) == {
        "num_cpus": 2, "num_gpus": 0, "resources": {"gpu": 2, "acme_fpga": 1},
    }


@pytest.mark.parametrize(
    "factory", ["gpu", "accelflow.resources.gpu:GPUDriverFactory",
                "org.apache.flink.externalresource.gpu.GPUDriverFactory"],
)
def test_the_builtin_gpu_plugin_implements_the_protocol(factory: str) -> None:
    assert isinstance(GPUDriverFactory(), RayResourceDecorator)
    config = config_from(values=conf(gpu=(factory, 3)))
    assert actor_resources(config) == {"num_cpus": 2, "num_gpus": 3, "resources": {}}


def test_the_actor_learns_which_ids_ray_assigned(acme: str) -> None:
    specs = [
        ExternalResourceSpec(name="gpu", amount=2, driver_factory="gpu"),
        ExternalResourceSpec(name="acme", amount=1, driver_factory=f"{acme}:AcmeGPUFactory"),
        ExternalResourceSpec(name="tpu", amount=1, driver_factory=f"{acme}:TPUFactory"),
        ExternalResourceSpec(name="fpga", amount=1, driver_factory=f"{acme}:PlainFactory"),
    ]

    env = ray_accelerator_env(specs, {"GPU": ["2", 3], "TPU": ["0"]})

    assert env == {
        "ACCELFLOW_RAY_GPU_IDS": "2,3",
        "ACME_RAY_GPU_IDS": "2,3",
        "ACME_TPU_IDS": "0",
    }


def test_a_factory_returning_something_else_is_a_deployment_error(acme: str) -> None:
    spec = ExternalResourceSpec(name="gpu", amount=1, driver_factory=f"{acme}:Broken")
    with pytest.raises(DeploymentError, match="must return accelflow.resources.RayResources, got dict") as info:
        ray_resources_of(spec)
    assert "external-resource.gpu.driver-factory.class" in str(info.value)


@pytest.mark.parametrize(
    "kwargs", [{"num_gpus": -1}, {"resources": {"x": float("inf")}}, {"resources": {"x": True}},
               {"accelerator_ids_env": " "}],
)
def test_ray_resources_are_checked_when_built(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RayResources(**kwargs)  # type: ignore[arg-type]


def test_the_name_list_is_gone() -> None:
    import accelflow.resources.gpu as gpu
    from accelflow.resources.gpu import _ray

    assert not hasattr(gpu, "is_gpu_plugin") and not hasattr(_ray, "GPU_FACTORY_NAMES")
