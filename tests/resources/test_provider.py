"""The per-TaskExecutor info provider: each driver built once, run once with its amount, its
devices held by resource name, and given back (release, then close) exactly once.

The drivers below are real ``ExternalResourceDriver`` subclasses, loaded through the config by
their import path like any driver; they record what the runtime asks of them in ``EVENTS``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from accelflow import ConfigError, DiscoveryError, DriverLoadError
from accelflow.config import config_from
from accelflow.resources import (
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    ExternalResourceInfo,
    ExternalResourceInfoProvider,
)

EVENTS: list[tuple[Any, ...]] = []
FACTORY = f"{__name__}:RecordingFactory"


class RecordingDriver(ExternalResourceDriver):
    """Params: ``label`` (names it in EVENTS), ``count`` (infos to return, default: the
    amount), ``fail`` (``retrieve``, ``release`` or ``close`` raise), ``returns`` (``none``,
    ``junk`` or ``duplicates``: a broken driver)."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self.label = params.get("label", "?")
        self.count = int(params["count"]) if "count" in params else None
        self.fail = params.get("fail", "")
        self.returns = params.get("returns", "")

    def retrieve_resource_info(self, amount: int) -> Any:
        EVENTS.append((self.label, "retrieve", amount))
        if self.fail == "retrieve":
            raise RuntimeError("the card fell off the bus")
        if self.returns == "none":
            return None
        if self.returns == "junk":
            return {"0", ExternalResourceInfo(index="1")}
        if self.returns == "duplicates":
            return {ExternalResourceInfo(index="0", a="1"), ExternalResourceInfo(index="0", a="2")}
        count = amount if self.count is None else self.count
        return {ExternalResourceInfo(index=str(i), owner=self.label) for i in range(count)}

    def isolation_env(self, infos: Collection[ExternalResourceInfo]) -> Mapping[str, str]:
        return {f"{self.label.upper()}_VISIBLE": ",".join(i.address for i in sorted(infos))}

    def release(self, infos: Collection[ExternalResourceInfo]) -> None:
        EVENTS.append((self.label, "release", tuple(i.address for i in sorted(infos))))
        if self.fail == "release":
            raise RuntimeError("release failed")

    def close(self) -> None:
        EVENTS.append((self.label, "close"))
        if self.fail == "close":
            raise RuntimeError("close failed")


class RecordingFactory(ExternalResourceDriverFactory):
    """Param ``create`` makes it raise: ``config-relative``, ``config-param``, ``config-bare``,
    ``config-full``, ``runtime`` or ``not-a-driver``."""

    def create_external_resource_driver(self, params: Mapping[str, str]) -> Any:
        EVENTS.append((params.get("label", "?"), "create", params))
        problem = params.get("create", "")
        if problem == "config-relative":
            raise ConfigError("must be an absolute path", key="param.discovery-script.path")
        if problem == "config-param":
            raise ConfigError("unknown parameter(s) ['colour']", key="param")
        if problem == "config-bare":
            raise ConfigError("the parameters contradict each other")
        if problem == "config-full":
            raise ConfigError("must be at least 2", key="external-resource.fpga.amount")
        if problem == "runtime":
            raise RuntimeError("the vendor library is not loaded")
        if problem == "not-a-driver":
            return object()
        return RecordingDriver(params)


@pytest.fixture(autouse=True)
def events() -> Iterator[list[tuple[Any, ...]]]:
    EVENTS.clear()
    yield EVENTS
    EVENTS.clear()


Resource = tuple[str, int, dict[str, str | None]]


def config(*resources: Resource, **extra: Any) -> Any:
    """A config of ``(name, amount, params)`` resources, each driven by RecordingFactory
    (``params["driver"]`` overrides the factory; ``None`` means no driver)."""
    values: dict[str, Any] = {"external-resources": ";".join(r[0] for r in resources)}
    for name, amount, params in resources:
        prefix = f"external-resource.{name}."
        values[prefix + "amount"] = amount
        driver = params.pop("driver", FACTORY)
        if driver is not None:
            values[prefix + "driver-factory.class"] = driver
        values.update({prefix + "param." + p: v for p, v in params.items()})
    values.update(extra)
    return config_from(values=values)


def provide(*resources: Resource, **extra: Any) -> ExternalResourceInfoProvider:
    return ExternalResourceInfoProvider.from_config(config(*resources, **extra))


# -- building and discovery ------------------------------------------------------------------


def test_each_driver_is_built_once_and_called_once_with_its_amount(events: list[tuple[Any, ...]]) -> None:
    provider = provide(("gpu", 2, {"label": "gpu"}), ("fpga", 1, {"label": "fpga"}))

    assert [e[:2] for e in events] == [("gpu", "create"), ("gpu", "retrieve"), ("fpga", "create"), ("fpga", "retrieve")]
    assert ("gpu", "retrieve", 2) in events and ("fpga", "retrieve", 1) in events
    assert provider.get_external_resource_infos("gpu") == frozenset(
        {ExternalResourceInfo(index="0", owner="gpu"), ExternalResourceInfo(index="1", owner="gpu")}
    )
    assert provider.get_external_resource_infos("fpga") == frozenset({ExternalResourceInfo(index="0", owner="fpga")})


def test_the_factory_gets_only_its_own_params_read_only_prefix_stripped(events: list[tuple[Any, ...]]) -> None:
    provide(
        ("gpu", 2, {"label": "gpu", "discovery-script.path": "/opt/find", "timeout": "5"}),
        ("fpga", 1, {"label": "fpga", "secret": "not for gpu"}),
        **{"external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu"},
    )

    params = next(e[2] for e in events if e[:2] == ("gpu", "create"))
    assert isinstance(params, MappingProxyType)
    assert dict(params) == {"label": "gpu", "discovery-script.path": "/opt/find", "timeout": "5"}
    with pytest.raises(TypeError):
        params["timeout"] = "6"  # type: ignore[index]


def test_the_provider_returns_frozensets_and_an_empty_one_for_unknown_names() -> None:
    provider = provide(("gpu", 1, {}))

    assert isinstance(provider.get_external_resource_infos("gpu"), frozenset)
    assert provider.get_external_resource_infos("tpu") == frozenset()
    assert provider.get_external_resource_infos("") == frozenset()


def test_a_resource_without_a_driver_has_no_infos_and_status_no_driver(events: list[tuple[Any, ...]]) -> None:
    provider = provide(("gpu", 2, {"driver": None}))

    assert events == []
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert provider.statuses["gpu"].status == "no-driver"


def test_fewer_infos_than_the_amount_fail_and_give_the_devices_back(events: list[tuple[Any, ...]]) -> None:
    with pytest.raises(DiscoveryError) as info:
        provide(("gpu", 3, {"label": "gpu", "count": "2"}))

    assert info.value.resource == "gpu"
    assert str(info.value) == (
        "discovery of 'gpu' failed: found 2 device(s) ['0', '1'], but external-resource.gpu.amount "
        "is 3 (set external-resource.gpu.on-discovery-failure: degrade to start without it)"
    )
    assert events[2:] == [("gpu", "release", ("0", "1")), ("gpu", "close")]


def test_more_infos_than_the_amount_are_trimmed_with_a_warning(
    events: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="accelflow.resources"):
        provider = provide(("gpu", 2, {"label": "gpu", "count": "11"}))

    assert sorted(i.address for i in provider.get_external_resource_infos("gpu")) == ["0", "1"]
    (warning,) = provider.statuses["gpu"].warnings
    assert warning.startswith("gpu: the driver returned 11 devices, keeping the first 2 (0, 1) per "
                              "external-resource.gpu.amount and releasing 2, 3, 4")
    assert [r.getMessage() for r in caplog.records] == [warning]
    assert events[2] == ("gpu", "release", ("2", "3", "4", "5", "6", "7", "8", "9", "10"))

    provider.close()
    assert events[3:] == [("gpu", "release", ("0", "1")), ("gpu", "close")]


def test_a_driver_that_raises_fails_the_task_executor_by_default(events: list[tuple[Any, ...]]) -> None:
    with pytest.raises(DiscoveryError) as info:
        provide(("gpu", 1, {"label": "gpu", "fail": "retrieve"}))

    assert info.value.resource == "gpu"
    assert "discovery of 'gpu' failed: RuntimeError: the card fell off the bus" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert events[-1] == ("gpu", "close")  # the failed driver is closed, not leaked


def test_under_degrade_a_failing_resource_has_no_infos_and_says_why(
    events: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="accelflow.resources"):
        provider = provide(
            ("gpu", 1, {"label": "gpu", "fail": "retrieve"}),
            ("fpga", 1, {"label": "fpga"}),
            **{"external-resource.gpu.on-discovery-failure": "degrade"},
        )

    status = provider.statuses["gpu"]
    assert status.status == "degraded" and status.infos == ()
    assert status.message == "discovery of 'gpu' failed: RuntimeError: the card fell off the bus"
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert provider.statuses["fpga"].status == "ok"  # the other resource is unaffected
    assert [r.getMessage() for r in caplog.records] == [
        f"{status.message}; continuing without it (on-discovery-failure: degrade)"
    ]
    provider.close()
    assert events[-3:] == [("gpu", "close"), ("fpga", "release", ("0",)), ("fpga", "close")]


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("none", "the driver returned NoneType, not a set of ExternalResourceInfo"),
        ("junk", "the driver returned '0' (str), not an ExternalResourceInfo"),
        ("duplicates", "the driver returned duplicate addresses: ['0', '0']"),
    ],
)
def test_a_broken_driver_is_a_discovery_failure(returns: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        provide(("gpu", 1, {"returns": returns}))


# -- factories that fail ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("create", "key"),
    [
        ("config-relative", "external-resource.fpga.param.discovery-script.path"),
        ("config-param", "external-resource.fpga.param"),
        ("config-bare", "external-resource.fpga.param.*"),
        ("config-full", "external-resource.fpga.amount"),
    ],
)
def test_a_factory_config_error_names_the_full_key(create: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        provide(("fpga", 1, {"create": create}))

    assert info.value.keys == (key,)
    assert isinstance(info.value.__cause__, ConfigError)
    assert info.value.problems[0].message == info.value.__cause__.problems[0].message


def test_a_factory_that_raises_is_a_config_error_naming_the_factory_key() -> None:
    with pytest.raises(ConfigError) as info:
        provide(("fpga", 1, {"create": "runtime"}))

    assert str(info.value) == (
        f"external-resource.fpga.driver-factory.class: driver factory {FACTORY!r} rejected its "
        "parameters: RuntimeError: the vendor library is not loaded"
    )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_factory_that_returns_no_driver_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="returned object, not an ExternalResourceDriver"):
        provide(("fpga", 1, {"create": "not-a-driver"}))


def test_an_unloadable_factory_is_a_driver_load_error_naming_the_key() -> None:
    with pytest.raises(DriverLoadError) as info:
        provide(("fpga", 1, {"driver": "no_such_module_xyz:Factory"}))

    assert (info.value.resource, info.value.key) == ("fpga", "external-resource.fpga.driver-factory.class")


@pytest.mark.parametrize(
    "broken", [{"fail": "retrieve"}, {"create": "runtime"}, {"driver": "no_such_module_xyz:F"}]
)
def test_a_later_failure_gives_back_what_earlier_drivers_found(
    events: list[tuple[Any, ...]], broken: dict[str, str | None]
) -> None:
    with pytest.raises((DiscoveryError, ConfigError, DriverLoadError)):
        provide(("gpu", 2, {"label": "gpu"}), ("fpga", 1, {"label": "fpga", **broken}))

    assert ("gpu", "release", ("0", "1")) in events
    assert events.index(("gpu", "release", ("0", "1"))) < events.index(("gpu", "close"))


# -- shutdown --------------------------------------------------------------------------------


def test_close_releases_then_closes_every_driver_once(events: list[tuple[Any, ...]]) -> None:
    provider = provide(("gpu", 2, {"label": "gpu"}), ("fpga", 1, {"label": "fpga"}))
    events.clear()

    provider.close()
    provider.close()

    assert events == [
        ("gpu", "release", ("0", "1")), ("gpu", "close"),
        ("fpga", "release", ("0",)), ("fpga", "close"),
    ]


@pytest.mark.parametrize("fail", ["release", "close"])
def test_close_goes_on_when_a_driver_raises_and_logs_it(
    events: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture, fail: str
) -> None:
    provider = provide(("gpu", 1, {"label": "gpu", "fail": fail}), ("fpga", 1, {"label": "fpga"}))
    events.clear()

    with caplog.at_level(logging.ERROR, logger="accelflow.resources"):
        provider.close()

    assert events == [("gpu", "release", ("0",)), ("gpu", "close"), ("fpga", "release", ("0",)), ("fpga", "close")]
    (record,) = caplog.records
    assert record.getMessage() == "releasing external resource 'gpu' failed"
    assert record.exc_info is not None and str(record.exc_info[1]) == f"{fail} failed"


def test_the_provider_is_a_context_manager(events: list[tuple[Any, ...]]) -> None:
    with provide(("gpu", 1, {"label": "gpu"})) as provider:
        assert provider.get_external_resource_infos("gpu")
    assert events[-2:] == [("gpu", "release", ("0",)), ("gpu", "close")]


# -- isolation and reporting -----------------------------------------------------------------


def test_isolation_env_asks_the_driver_of_each_assigned_resource() -> None:
    provider = provide(("gpu", 3, {"label": "gpu"}), ("fpga", 1, {"label": "fpga"}), ("tpu", 1, {"driver": None}))
    gpus = sorted(provider.get_external_resource_infos("gpu"))

    env = provider.isolation_env({"gpu": gpus[1:], "fpga": [], "tpu": [ExternalResourceInfo(index="0")]})

    assert env == {"GPU_VISIBLE": "1,2"}


def test_statuses_report_what_each_resource_found() -> None:
    provider = provide(
        ("gpu", 1, {"label": "gpu"}),
        ("tpu", 4, {"driver": None}),
        **{"external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu",
           "external-resource.gpu.yarn.config-key": "yarn.io/gpu"},
    )

    assert [s.to_dict() for s in provider.statuses.values()] == [
        {"name": "gpu", "amount": 1, "driver": FACTORY, "status": "ok", "message": None, "warnings": [],
         "infos": [{"index": "0", "owner": "gpu"}], "kubernetes_config_key": "nvidia.com/gpu",
         "yarn_config_key": "yarn.io/gpu"},
        {"name": "tpu", "amount": 4, "driver": None, "status": "no-driver", "message": None, "warnings": [],
         "infos": [], "kubernetes_config_key": None, "yarn_config_key": None},
    ]
    with pytest.raises(TypeError):
        provider.statuses["x"] = provider.statuses["gpu"]  # type: ignore[index]


def _gpu_config(tmp_path: Any, **params: str) -> Any:
    return config_from(values={
        "external-resources": "gpu", "external-resource.gpu.amount": 1,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination": "false",
        **{f"external-resource.gpu.param.{k}": v for k, v in params.items()},
    })


def test_health_keys_are_every_driver_s_and_reach_no_driver_factory(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: the GPU driver rejects keys it does not know; the provider splits the
    ``param.health.*`` keys off first, keeps them as the resource's health config, and builds the
    device watch the TaskExecutor's monitor uses (NVML, else nvidia-smi: here the fake)."""
    from accelflow.testing import use_fake_nvidia_smi

    use_fake_nvidia_smi(monkeypatch, tmp_path, 2)
    config = _gpu_config(tmp_path, **{"health.probe-interval": "2 s", "health.memory-release-timeout": "5 s"})
    with ExternalResourceInfoProvider.from_config(config) as provider:
        health = provider.statuses["gpu"].health
        assert (health.probe_interval, health.memory_release_timeout) == (2.0, 5.0)
        [(name, (watch, watched_config))] = provider.device_watches().items()
        assert name == "gpu" and watched_config is health
        assert watch.probe()["0"].reachable is True
        watch.close()
    with ExternalResourceInfoProvider.from_config(_gpu_config(tmp_path, **{"health.enabled": "false"})) as provider:
        assert provider.device_watches() == {}


def test_a_wrong_health_key_is_named_in_full_with_a_did_you_mean(tmp_path: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        ExternalResourceInfoProvider.from_config(_gpu_config(tmp_path, **{"health.probe-intervall": "2 s"}))
    [problem] = caught.value.problems
    assert problem.key == "external-resource.gpu.param.health.probe-intervall"
    assert "did you mean param.health.probe-interval?" in problem.message
