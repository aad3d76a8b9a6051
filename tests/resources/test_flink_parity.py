"""Flink's External Resource Framework tests, reproduced (reference notes §5, items 1-12, 33).

Each test names the Flink behaviour it mirrors. Where accelflow is deliberately stricter
(Flink logs a warning and drops the resource; we refuse the config and name the key), the test
checks the stricter behaviour and its docstring says so. The Flink "maps" are views of our
typed config: the config-key map is ``{name: spec.kubernetes_config_key}``, the amount map
``{name: spec.amount}``, the drivers the provider's statuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow import ConfigError, DriverLoadError
from accelflow.config import Configuration, ExternalResourceSpec, config_from
from accelflow.resources import ExternalResourceInfo, ExternalResourceInfoProvider
from accelflow.testing import install_fake_nvidia_smi
from accelflow.testing._nvidia_smi import fake_gpu_uuid

STATIC = "accelflow.testing:StaticDriverFactory"


def kubernetes_keys(conf: Configuration) -> dict[str, str]:
    return {n: s.kubernetes_config_key for n, s in conf.external_resources.items() if s.kubernetes_config_key}


def amounts(conf: Configuration) -> dict[str, int]:
    return {n: s.amount for n, s in conf.external_resources.items()}


FOO_BAR = {
    "external-resources": "foo;bar",
    "external-resource.foo.amount": 1,
    "external-resource.bar.amount": 1,
}


def test_01_a_blank_config_key_is_an_error() -> None:
    """Flink: foo's config key "" -> the config-key map is empty (WARN). Stricter: a blank key
    is an error naming it; a resource without the key simply has none."""
    with pytest.raises(ConfigError) as info:
        config_from(values={**FOO_BAR, "external-resource.foo.kubernetes.config-key": ""})
    assert info.value.keys == ("external-resource.foo.kubernetes.config-key",)
    assert kubernetes_keys(config_from(values=FOO_BAR)) == {}


def test_02_two_resources_with_one_config_key_is_an_error() -> None:
    """Flink: foo and bar both keyed 'flink1' -> map size 1, one dropped at random. Stricter:
    an error naming the second resource's key and the first resource."""
    with pytest.raises(ConfigError) as info:
        config_from(values={
            **FOO_BAR,
            "external-resource.foo.kubernetes.config-key": "example.com/flink1",
            "external-resource.bar.kubernetes.config-key": "example.com/flink1",
        })
    assert str(info.value) == (
        "external-resource.bar.kubernetes.config-key (from dict): 'example.com/flink1' is also "
        "the kubernetes.config-key of resource 'foo'; each resource needs its own key"
    )


def test_03_a_resource_with_an_available_factory_gets_a_driver() -> None:
    """Flink: foo with a factory available as a plugin -> drivers {foo: TestingDriver}."""
    conf = config_from(values={
        "external-resources": "foo", "external-resource.foo.amount": 1,
        "external-resource.foo.driver-factory.class": STATIC,
        "external-resource.foo.param.addresses": "0",
    })
    with ExternalResourceInfoProvider.from_config(conf) as provider:
        assert {n: s.status for n, s in provider.statuses.items()} == {"foo": "ok"}
        assert provider.statuses["foo"].spec.driver_factory == STATIC


def test_04_a_resource_without_a_factory_gets_no_driver() -> None:
    """Flink: foo with no factory class -> no drivers (the resource is still requested)."""
    conf = config_from(values={
        "external-resources": "foo", "external-resource.foo.amount": 1,
        "external-resource.foo.kubernetes.config-key": "example.com/foo",
    })
    with ExternalResourceInfoProvider.from_config(conf) as provider:
        assert provider.statuses["foo"].status == "no-driver"
        assert provider.get_external_resource_infos("foo") == frozenset()
    assert kubernetes_keys(conf) == {"foo": "example.com/foo"}  # still requested from Kubernetes


def test_05_a_factory_that_cannot_be_found_is_an_error() -> None:
    """Flink: a factory class absent from the plugins -> no drivers (WARN). Stricter: a
    DriverLoadError naming the key."""
    conf = config_from(values={
        "external-resources": "foo", "external-resource.foo.amount": 1,
        "external-resource.foo.driver-factory.class": "org.example.NoSuchFactory",
    })
    with pytest.raises(DriverLoadError) as info:
        ExternalResourceInfoProvider.from_config(conf)
    assert info.value.key == "external-resource.foo.driver-factory.class"


def test_06_a_factory_that_throws_is_an_error() -> None:
    """Flink: the factory throws -> no drivers, no exception. Stricter: a ConfigError naming
    the parameter the factory rejected, by its full key."""
    conf = config_from(values={
        "external-resources": "foo", "external-resource.foo.amount": 1,
        "external-resource.foo.driver-factory.class": STATIC,
    })
    with pytest.raises(ConfigError) as info:
        ExternalResourceInfoProvider.from_config(conf)
    assert info.value.keys == ("external-resource.foo.param.addresses",)


def test_07_a_resource_with_an_amount_and_a_driver_has_infos() -> None:
    """Flink: amount {foo: 2} and a foo driver -> the provider holds an entry for foo."""
    conf = config_from(values={
        "external-resources": "foo", "external-resource.foo.amount": 2,
        "external-resource.foo.driver-factory.class": STATIC,
        "external-resource.foo.param.addresses": "0,1",
    })
    with ExternalResourceInfoProvider.from_config(conf) as provider:
        assert provider.get_external_resource_infos("foo") == {
            ExternalResourceInfo(index="0"), ExternalResourceInfo(index="1")
        }


def test_08_a_driver_without_an_amount_is_an_error() -> None:
    """Flink: a driver but no amount -> the provider is empty (WARN). Stricter: the missing
    amount is an error naming the amount key."""
    with pytest.raises(ConfigError) as info:
        config_from(values={
            "external-resources": "foo",
            "external-resource.foo.driver-factory.class": STATIC,
            "external-resource.foo.param.addresses": "0",
        })
    assert str(info.value) == "external-resource.foo.amount: resource 'foo' is listed but has no amount"


def test_09_the_amount_map() -> None:
    """Flink: foo amount 2 -> amount map {foo: 2}."""
    assert amounts(config_from(values={"external-resources": "foo", "external-resource.foo.amount": 2})) == {"foo": 2}


def test_10_a_zero_amount_is_an_error() -> None:
    """Flink: foo amount 0 -> the amount map is empty (WARN). Stricter: an error."""
    with pytest.raises(ConfigError) as info:
        config_from(values={"external-resources": "foo", "external-resource.foo.amount": 0})
    assert str(info.value) == "external-resource.foo.amount (from dict): expected a positive integer, got 0 (int)"


def test_11_the_resources_collection() -> None:
    """Flink: the collection for foo amount 2 -> [ExternalResource(foo, 2)]."""
    conf = config_from(values={"external-resources": "foo", "external-resource.foo.amount": 2})
    assert list(conf.external_resources.values()) == [ExternalResourceSpec(name="foo", amount=2)]


def test_12_none_with_an_amount_still_set_means_no_resources() -> None:
    """Flink: external-resources=none with an amount still set -> an empty collection. Also
    accelflow warns that the amount is ignored."""
    conf = config_from(values={"external-resources": "none", "external-resource.foo.amount": 2})
    assert list(conf.external_resources.values()) == []
    assert conf.warnings == (
        "external-resource.foo.amount: resource 'foo' is not listed in external-resources; ignored",
    )


def test_33_the_provider_returns_an_empty_set_for_an_unknown_name() -> None:
    """Flink: provider, unknown name -> an empty set."""
    assert ExternalResourceInfoProvider.from_config(config_from()).get_external_resource_infos("foo") == frozenset()
    assert ExternalResourceInfoProvider().get_external_resource_infos("foo") == frozenset()


# -- issue 12.1: Flink's GPU config runs verbatim ---------------------------------------------

FLINK_BLOG_CONFIG = """\
external-resources: gpu
external-resource.gpu.driver-factory.class: org.apache.flink.externalresource.gpu.GPUDriverFactory
external-resource.gpu.amount: 1
external-resource.gpu.param.discovery-script.args: --enable-coordination
"""


def _resources_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelflow", "resources", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )


def _fake_gpu_env(tmp_path: Path, gpus: int = 2) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ACCELFLOW_CONF", "ACCELFLOW_HOME")}
    env["COLUMNS"] = "200"
    temp = tmp_path / "tmp"  # the default coordination file lives under the temp directory
    temp.mkdir()
    env["TMPDIR"] = str(temp)
    install_fake_nvidia_smi(tmp_path / "bin", gpus, environ=env)
    return env


def test_flinks_blog_config_verbatim_discovers_a_gpu(tmp_path: Path) -> None:
    """https://flink.apache.org/2020/08/06/accelerating-your-workload-with-gpu-and-other-external-resources/"""
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(FLINK_BLOG_CONFIG)
    env = _fake_gpu_env(tmp_path)

    table = _resources_cli(env, "--conf", str(conf))
    as_json = _resources_cli(env, "--conf", str(conf), "--json")

    assert table.returncode == 0, table.stderr
    assert "Traceback" not in table.stderr
    assert fake_gpu_uuid(0) in table.stdout and fake_gpu_uuid(1) not in table.stdout
    assert as_json.returncode == 0, as_json.stderr
    (gpu,) = json.loads(as_json.stdout)["resources"]
    assert gpu["status"] == "ok"
    assert gpu["driver"] == "org.apache.flink.externalresource.gpu.GPUDriverFactory"
    assert [(i["index"], i["uuid"]) for i in gpu["infos"]] == [("0", fake_gpu_uuid(0))]
    # --enable-coordination turned on the host coordination file (default place: temp dir)
    assert list((tmp_path / "tmp").rglob("*.json")), list((tmp_path / "tmp").rglob("*"))


def test_flinks_coordination_file_argument_names_the_file(tmp_path: Path) -> None:
    coordination = tmp_path / "flink-gpu-coordination.json"
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        FLINK_BLOG_CONFIG.replace(
            "--enable-coordination\n",
            f"--enable-coordination-mode --coordination-file {coordination}\n",
        )
    )

    done = _resources_cli(_fake_gpu_env(tmp_path), "--conf", str(conf), "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resources"][0]["status"] == "ok"
    assert coordination.is_file()
    assert not list((tmp_path / "tmp").rglob("*.json"))  # not the default file


def test_an_unknown_default_discovery_argument_is_a_config_error_naming_it(tmp_path: Path) -> None:
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(FLINK_BLOG_CONFIG.replace("--enable-coordination", "--enable-coordination --gpus-per-node 4"))

    done = _resources_cli(_fake_gpu_env(tmp_path), "--conf", str(conf))

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "external-resource.gpu.param.discovery-script.args" in done.stderr
    assert "--gpus-per-node" in done.stderr


def test_an_invalid_factory_class_is_named_as_configured() -> None:
    """Flink's ExternalResourceUtilsTest (issue 12.6): the message names the configured class."""
    conf = config_from(values={
        "external-resources": "x", "external-resource.x.amount": 1,
        "external-resource.x.driver-factory.class": "org.example.someinvalidclass",
    })
    with pytest.raises(DriverLoadError) as info:
        ExternalResourceInfoProvider.from_config(conf)
    assert "org.example.someinvalidclass" in str(info.value)
    assert info.value.key == "external-resource.x.driver-factory.class"
