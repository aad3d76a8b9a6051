"""Loading and validating configuration: the rules of issue 2, item 3.

Every malformed input must raise one :class:`accelflow.ConfigError` that lists every problem,
one per key, each naming its key and where the value came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accelflow import ConfigError
from accelflow.config import Configuration, config_from, load_config, parse_definitions, read_yaml
from accelflow.config import keys as k

GPU = {"external-resources": "gpu", "external-resource.gpu.amount": 1}


def load(**values: Any) -> Configuration:
    return config_from(values=values)


def problems(values: dict[str, Any]) -> dict[str, list[str]]:
    """Load ``values`` and return the problems as ``{key: [message, ...]}``."""
    with pytest.raises(ConfigError) as info:
        config_from(values=values)
    found: dict[str, list[str]] = {}
    for problem in info.value.problems:
        found.setdefault(problem.key, []).append(problem.message)
    return found


def only_problem(values: dict[str, Any]) -> tuple[str, str]:
    found = problems(values)
    assert len(found) == 1 and len(next(iter(found.values()))) == 1, found
    key, (message,) = next(iter(found.items()))
    return key, message


# -- external-resources ----------------------------------------------------------------------


def test_names_are_split_on_semicolons_trimmed_and_keep_their_order() -> None:
    config = config_from(values={
        "external-resources": " gpu ; fpga;tpu_v4 ",
        **{f"external-resource.{n}.amount": 1 for n in ("gpu", "fpga", "tpu_v4")},
    })

    assert list(config.external_resources) == ["gpu", "fpga", "tpu_v4"]
    assert config.values["external-resources"] == ("gpu", "fpga", "tpu_v4")


def test_a_yaml_list_of_names_is_accepted() -> None:
    config = config_from(values={**GPU, "external-resources": ["gpu"]})
    assert list(config.external_resources) == ["gpu"]


def test_no_external_resources_key_means_none() -> None:
    assert load().external_resources == {}


@pytest.mark.parametrize("value", ["none", " none ", "NONE", "None"])
def test_none_alone_means_no_resources(value: str) -> None:
    config = load(**{"external-resources": value})
    assert config.external_resources == {}
    assert config.values["external-resources"] == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "name 1 is empty (names are separated by ';')"),
        ("  ", "name 1 is empty (names are separated by ';')"),
        (";gpu", "name 1 is empty (names are separated by ';')"),
        ("gpu;", "name 2 is empty (names are separated by ';')"),
        ("gpu; ;fpga", "name 2 is empty (names are separated by ';')"),
        ("gpu;gpu", "'gpu' is listed twice"),
        ("gpu; gpu ", "'gpu' is listed twice"),
        ("gpu;none", "'none' alone means no resources; it cannot be a resource name"),
        ("None;gpu", "'none' alone means no resources; it cannot be a resource name"),
    ],
)
def test_empty_duplicate_and_none_names_are_errors(value: str, message: str) -> None:
    values = {"external-resources": value, "external-resource.gpu.amount": 1,
              "external-resource.fpga.amount": 1}
    assert only_problem(values) == ("external-resources", message)


@pytest.mark.parametrize("name", ["gpu.0", "my gpu", "gpu\t1", "-gpu", "_gpu", "gpu/0", "gpü"])
def test_names_with_dots_whitespace_or_odd_characters_are_errors(name: str) -> None:
    key, message = only_problem({"external-resources": name})
    assert key == "external-resources"
    assert message == (
        f"{name!r} is not a valid name: use letters, digits, '-' and '_', starting with a "
        "letter or digit (no dots or whitespace)"
    )


@pytest.mark.parametrize("value", [None, False, True])
def test_a_null_or_boolean_list_is_an_error_that_explains_yaml(value: object) -> None:
    key, message = only_problem({"external-resources": value})
    assert key == "external-resources"
    assert message.startswith(f"expected ';'-separated names such as 'gpu;fpga' or 'none', got {value!r}")
    assert "quote it" in message


def test_every_bad_name_is_reported_not_just_the_first() -> None:
    found = problems({"external-resources": "a.b;;a-b;a-b;none"})
    assert found == {"external-resources": [
        "'a.b' is not a valid name: use letters, digits, '-' and '_', starting with a letter "
        "or digit (no dots or whitespace)",
        "name 2 is empty (names are separated by ';')",
        "'a-b' is listed twice",
        "'none' alone means no resources; it cannot be a resource name",
    ], "external-resource.a-b.amount": ["resource 'a-b' is listed but has no amount"]}


# -- external-resource.<name>.amount ---------------------------------------------------------


@pytest.mark.parametrize(("value", "amount"), [(1, 1), ("2", 2), (" 3 ", 3), ("+4", 4), (2**40, 2**40)])
def test_amount_is_a_positive_whole_number(value: object, amount: int) -> None:
    config = config_from(values={**GPU, "external-resource.gpu.amount": value})
    assert config.external_resources["gpu"].amount == amount


def test_a_missing_amount_is_an_error_naming_the_amount_key() -> None:
    assert only_problem({"external-resources": "gpu"}) == (
        "external-resource.gpu.amount", "resource 'gpu' is listed but has no amount"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0 (int)"), ("0", "'0'"), (-1, "-1 (int)"), ("-1", "'-1'"),
        (1.5, "1.5 (float)"), ("1.5", "'1.5'"), (2.0, "2.0 (float)"), ("1e3", "'1e3'"),
        ("two", "'two'"), ("", "''"), (True, "True (bool)"), (None, "None (NoneType)"),
        ("0x10", "'0x10'"), ("1/2", "'1/2'"), ([1], "[1] (list)"), ("٣", "'٣'"),
    ],
)
def test_zero_negative_fractional_or_non_numeric_amounts_are_errors(value: object, shown: str) -> None:
    """Stricter than Flink, which ignores zero/negative amounts with a warning."""
    key, message = only_problem({**GPU, "external-resource.gpu.amount": value})
    assert key == "external-resource.gpu.amount"
    assert message == f"expected a positive integer, got {shown}"


# -- external-resource.<name>.driver-factory.class -------------------------------------------


@pytest.mark.parametrize(
    "value", ["accelflow.testing:StaticDriverFactory", "accelflow.testing.StaticDriverFactory", "gpu"]
)
def test_driver_factory_is_kept_as_given(value: str) -> None:
    config = config_from(values={**GPU, "external-resource.gpu.driver-factory.class": f" {value} "})
    assert config.external_resources["gpu"].driver_factory == value


def test_without_a_driver_factory_the_resource_still_exists() -> None:
    spec = config_from(values=GPU).external_resources["gpu"]
    assert spec.driver_factory is None
    assert spec.amount == 1


@pytest.mark.parametrize("value", ["", "   ", None])
def test_an_empty_driver_factory_is_an_error(value: object) -> None:
    key, _ = only_problem({**GPU, "external-resource.gpu.driver-factory.class": value})
    assert key == "external-resource.gpu.driver-factory.class"


# -- external-resource.<name>.param.<p> ------------------------------------------------------


def test_params_have_their_prefix_stripped_and_become_read_only_strings() -> None:
    config = config_from(values={
        "external-resources": "gpu;fpga",
        "external-resource.gpu.amount": 2,
        "external-resource.fpga.amount": 1,
        "external-resource.gpu.param.discovery-script.path": "/opt/find-gpus",
        "external-resource.gpu.param.timeout": 5,
        "external-resource.gpu.param.coordination": True,
        "external-resource.gpu.param.share": 0.5,
        "external-resource.fpga.param.addresses": "0",
    })

    params = config.external_resources["gpu"].params
    assert dict(params) == {
        "discovery-script.path": "/opt/find-gpus",
        "timeout": "5",
        "coordination": "true",
        "share": "0.5",
    }
    with pytest.raises(TypeError):
        params["timeout"] = "6"  # type: ignore[index]
    assert dict(config.external_resources["fpga"].params) == {"addresses": "0"}


@pytest.mark.parametrize("value", [None, {"a": 1}, [1, 2]])
def test_a_param_without_a_scalar_value_is_an_error(value: object) -> None:
    """A null param would reach the driver as the text 'None' (Flink appends 'null')."""
    key, message = only_problem({**GPU, "external-resource.gpu.param.args": value})
    assert key == "external-resource.gpu.param.args"
    assert message == f"expected a text, number or boolean, got {value!r}"


def test_a_param_with_an_empty_name_is_an_unknown_key() -> None:
    key, message = only_problem({**GPU, "external-resource.gpu.param.": "x"})
    assert key == "external-resource.gpu.param."
    assert message.startswith("unknown key")


# -- kubernetes / yarn keys ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "example.com/a_b.c-d"])
def test_valid_kubernetes_extended_resource_names_are_accepted(value: str) -> None:
    config = config_from(values={**GPU, "external-resource.gpu.kubernetes.config-key": value})
    assert config.external_resources["gpu"].kubernetes_config_key == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("gpu", "expected '<vendor-domain>/<name>'"),
        ("Nvidia.com/gpu", "is not a DNS subdomain"),
        ("nvidia_com/gpu", "is not a DNS subdomain"),
        ("kubernetes.io/gpu", "the kubernetes.io domain is reserved"),
        ("node.kubernetes.io/gpu", "the kubernetes.io domain is reserved"),
        ("requests.nvidia.com/gpu", "reserved by quotas"),
        ("nvidia.com/", "is not a valid name"),
        ("nvidia.com/-gpu", "is not a valid name"),
        ("nvidia.com/" + "g" * 64, "is not a valid name"),
        ("", "must not be empty"),
    ],
)
def test_invalid_kubernetes_keys_are_errors(value: str, why: str) -> None:
    """Stricter than Flink, which passes any string to Kubernetes (and ignores blank keys)."""
    key, message = only_problem({**GPU, "external-resource.gpu.kubernetes.config-key": value})
    assert key == "external-resource.gpu.kubernetes.config-key"
    assert why in message


def test_vendor_is_shorthand_for_the_kubernetes_key_and_is_validated() -> None:
    config = config_from(values={**GPU, "external-resource.gpu.vendor": "nvidia.com"})
    assert config.external_resources["gpu"].kubernetes_config_key == "nvidia.com/gpu"

    key, message = only_problem({**GPU, "external-resource.gpu.vendor": "NVIDIA"})
    assert key == "external-resource.gpu.vendor"
    assert "is not a DNS subdomain" in message


@pytest.mark.parametrize("value", ["yarn.io/gpu", "gpu", "yarn.io/fpga-x.y_1", "a-b.example/Gpu"])
def test_valid_yarn_resource_types_are_accepted(value: str) -> None:
    config = config_from(values={**GPU, "external-resource.gpu.yarn.config-key": value})
    assert config.external_resources["gpu"].yarn_config_key == value


@pytest.mark.parametrize("value", ["yarn.io/1gpu", "yarn.io/", "/gpu", "yarn io/gpu", "memory-mb", "vcores"])
def test_invalid_yarn_resource_types_are_errors(value: str) -> None:
    key, _ = only_problem({**GPU, "external-resource.gpu.yarn.config-key": value})
    assert key == "external-resource.gpu.yarn.config-key"


@pytest.mark.parametrize(
    ("suffix", "value"), [("kubernetes.config-key", "nvidia.com/gpu"), ("yarn.config-key", "yarn.io/gpu")]
)
def test_two_resources_mapping_to_one_cluster_key_is_an_error(suffix: str, value: str) -> None:
    """Flink keeps one of the two at random (HashSet order); we refuse."""
    values = {
        "external-resources": "gpu;gpu2;gpu3",
        **{f"external-resource.{n}.amount": 1 for n in ("gpu", "gpu2", "gpu3")},
        **{f"external-resource.{n}.{suffix}": value for n in ("gpu", "gpu2", "gpu3")},
    }
    message = f"{value!r} is also the {suffix} of resource 'gpu'; each resource needs its own key"
    assert problems(values) == {
        f"external-resource.gpu2.{suffix}": [message],
        f"external-resource.gpu3.{suffix}": [message],
    }


def test_a_duplicate_through_the_vendor_shorthand_names_the_vendor_key() -> None:
    values = {
        "external-resources": "gpu;gpu2",
        "external-resource.gpu.amount": 1,
        "external-resource.gpu.vendor": "nvidia.com",
        "external-resource.gpu2.amount": 1,
        "external-resource.gpu2.kubernetes.config-key": "nvidia.com/gpu",
    }
    assert list(problems(values)) == ["external-resource.gpu2.kubernetes.config-key"]

    values["external-resources"] = "gpu2;gpu"  # listed order decides which one is "also"
    assert list(problems(values)) == ["external-resource.gpu.vendor"]


def test_a_duplicate_cluster_key_is_reported_even_when_the_resource_has_other_errors() -> None:
    found = problems({
        "external-resources": "gpu;gpu2",
        "external-resource.gpu.amount": 1,
        "external-resource.gpu2.amount": 0,
        "external-resource.gpu.yarn.config-key": "yarn.io/gpu",
        "external-resource.gpu2.yarn.config-key": "yarn.io/gpu",
    })
    assert set(found) == {"external-resource.gpu2.amount", "external-resource.gpu2.yarn.config-key"}


# -- on-discovery-failure --------------------------------------------------------------------


@pytest.mark.parametrize(("value", "policy"), [(None, "fail"), ("fail", "fail"), ("degrade", "degrade"), (" Degrade ", "degrade")])
def test_on_discovery_failure_is_fail_by_default_or_degrade(value: str | None, policy: str) -> None:
    values = dict(GPU)
    if value is not None:
        values["external-resource.gpu.on-discovery-failure"] = value
    assert config_from(values=values).external_resources["gpu"].on_discovery_failure == policy


@pytest.mark.parametrize("value", ["ignore", "warn", "", None, True])
def test_other_failure_policies_are_errors_listing_the_choices(value: object) -> None:
    key, message = only_problem({**GPU, "external-resource.gpu.on-discovery-failure": value})
    assert key == "external-resource.gpu.on-discovery-failure"
    assert message.startswith("expected one of fail, degrade; got ")


# -- unknown keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("external-resource.gpu.amout", "external-resource.gpu.amount"),
        ("external-resource.gpu.driver-factory", "external-resource.gpu.driver-factory.class"),
        ("external-resource.gpu.on-discovery-failures", "external-resource.gpu.on-discovery-failure"),
        ("external-resource.gpu.kubernetes.configkey", "external-resource.gpu.kubernetes.config-key"),
        ("external-resource", "external-resources"),
        ("externalresources", "external-resources"),
        ("taskmanager.numberOfTaskSlot", "taskmanager.numberOfTaskSlots"),
        ("parallelism.defualt", "parallelism.default"),
    ],
)
def test_unknown_keys_are_errors_with_a_did_you_mean(key: str, hint: str) -> None:
    assert only_problem({**GPU, key: "1"}) == (key, f"unknown key; did you mean {hint!r}?")


@pytest.mark.parametrize("key", ["totally.unknown", "gpu.amount", "external-resource.gpu.color"])
def test_unknown_keys_without_a_close_match_get_no_hint(key: str) -> None:
    assert only_problem({**GPU, key: "1"}) == (key, "unknown key")


def test_a_nested_mapping_is_explained() -> None:
    key, message = only_problem({"external-resource": {"gpu": {"amount": 1}}})
    assert key == "external-resource"
    assert "nested keys are not supported" in message
    assert "'external-resource.gpu.amount: 1'" in message


def test_a_resource_key_without_a_setting_is_an_error() -> None:
    key, message = only_problem({**GPU, "external-resource.gpu": 1})
    assert key == "external-resource.gpu"
    assert message == "expected external-resource.<name>.<setting>, e.g. .amount"


def test_keys_of_unlisted_resources_are_ignored_with_a_warning() -> None:
    config = config_from(values={**GPU, "external-resource.fpga.amount": 0})
    assert list(config.external_resources) == ["gpu"]
    assert config.warnings == (
        "external-resource.fpga.amount: resource 'fpga' is not listed in external-resources; ignored",
    )


# -- YAML files ------------------------------------------------------------------------------


def test_a_yaml_file_of_flat_keys_is_loaded(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "# accelerators\n"
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 2\n"
        "external-resource.gpu.param.coordination: true\n"
        "taskmanager.numberOfTaskSlots: 4\n"
    )

    config = config_from(conf_file=conf)

    assert config.external_resources["gpu"].amount == 2
    assert dict(config.external_resources["gpu"].params) == {"coordination": "true"}
    assert config.get(k.NUMBER_OF_TASK_SLOTS) == 4
    assert config.sources["external-resource.gpu.amount"] == str(conf)


def test_an_empty_file_is_an_empty_config(tmp_path: Path) -> None:
    conf = tmp_path / "empty.yaml"
    conf.write_text("# nothing yet\n")
    assert read_yaml(conf) == {}
    assert config_from(conf_file=conf).external_resources == {}


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        config_from(conf_file=missing)
    assert str(info.value) == f"{missing}: cannot read config file: No such file or directory"
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_a_directory_is_not_a_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_yaml(tmp_path)
    assert info.value.keys == (str(tmp_path),)
    assert "cannot read config file: not a regular file" in str(info.value)


def test_bad_yaml_is_reported_with_its_line_number(tmp_path: Path) -> None:
    conf = tmp_path / "bad.yaml"
    conf.write_text("external-resources: gpu\nexternal-resource.gpu.amount: [1\nfoo: bar\n")

    with pytest.raises(ConfigError) as info:
        read_yaml(conf)

    (problem,) = info.value.problems
    assert problem.key == str(conf)
    assert problem.message.startswith("not valid YAML at line 3: ")


@pytest.mark.parametrize("text", ["- gpu\n- fpga\n", "just a string\n", "42\n", "1: gpu\n"])
def test_a_file_that_is_not_a_mapping_of_keys_is_an_error(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "list.yaml"
    conf.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_yaml(conf)
    assert str(info.value) == (
        f"{conf}: expected a mapping of flat keys such as 'external-resource.gpu.amount: 1'"
    )


def test_a_file_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    conf = tmp_path / "latin1.yaml"
    conf.write_bytes("external-resources: gpü\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        read_yaml(conf)
    assert str(info.value) == f"{conf}: not UTF-8 text (byte 22); save the config file as UTF-8"


def test_an_impossible_yaml_date_is_a_config_error(tmp_path: Path) -> None:
    conf = tmp_path / "date.yaml"
    conf.write_text("external-resource.gpu.param.since: 2024-13-01\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(conf)
    assert str(info.value).startswith(f"{conf}: not valid YAML: month must be in 1..12")


# -- -D key=value ----------------------------------------------------------------------------


def test_definitions_are_split_at_the_first_equals_and_trimmed() -> None:
    assert parse_definitions(["a=1", " b = x=y ", "c="]) == {"a": "1", "b": "x=y", "c": ""}


def test_bad_definitions_are_all_reported_naming_the_argument() -> None:
    with pytest.raises(ConfigError) as info:
        parse_definitions(["external-resources", "=gpu", " =1", "ok=1"])
    assert [str(p) for p in info.value.problems] == [
        "-D external-resources: expected -D key=value",
        "-D =gpu: expected -D key=value",
        "-D ' =1': expected -D key=value",
    ]


def test_an_empty_definition_of_a_key_is_validated_like_any_value() -> None:
    with pytest.raises(ConfigError) as info:
        config_from(values=GPU, definitions=["external-resource.gpu.amount="])
    assert [str(p) for p in info.value.problems] == [
        "external-resource.gpu.amount (from -D): expected a positive integer, got ''"
    ]


# -- precedence ------------------------------------------------------------------------------


def test_precedence_is_file_then_dict_then_definitions(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 1\n"
        "taskmanager.numberOfTaskSlots: 1\n"
        "parallelism.default: 1\n"
    )

    config = config_from(
        conf_file=conf,
        values={"external-resource.gpu.amount": 2, "taskmanager.numberOfTaskSlots": 2},
        definitions=["external-resource.gpu.amount=3"],
    )

    assert config.external_resources["gpu"].amount == 3
    assert config.get(k.NUMBER_OF_TASK_SLOTS) == 2
    assert config.get(k.PARALLELISM_DEFAULT) == 1
    assert dict(config.sources) == {
        "external-resources": str(conf),
        "external-resource.gpu.amount": "-D",
        "taskmanager.numberOfTaskSlots": "dict",
        "parallelism.default": str(conf),
    }


def test_a_later_layer_can_fix_an_earlier_bad_value() -> None:
    config = load_config(({**GPU, "external-resource.gpu.amount": "zero"}, "a.yaml"), ({"external-resource.gpu.amount": 1}, "-D"))
    assert config.external_resources["gpu"].amount == 1


# -- all errors together ---------------------------------------------------------------------


def test_all_errors_are_collected_and_reported_one_per_line_with_their_source(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "external-resources: gpu;fpga;gpu.0\n"
        "external-resource.gpu.amount: -2\n"
        "external-resource.gpu.on-discovery-failure: sometimes\n"
        "external-resource.gpu.kubernetes.config-key: nvidia.com/gpu\n"
        "external-resource.fpga.kubernetes.config-key: nvidia.com/gpu\n"
        "external-resource.fpga.param.args:\n"
        "taskmanager.numberOfTaskSlots: many\n"
        "external-resource.gpu.vendr: nvidia.com\n"
    )

    with pytest.raises(ConfigError) as info:
        config_from(conf_file=conf, values={"rest.port": 70000}, definitions=["scheduler.placement-policy=random"])

    src = f"(from {conf})"
    assert str(info.value).splitlines() == [
        "external-resource.fpga.amount: resource 'fpga' is listed but has no amount",
        f"external-resource.fpga.kubernetes.config-key {src}: 'nvidia.com/gpu' is also the "
        "kubernetes.config-key of resource 'gpu'; each resource needs its own key",
        f"external-resource.fpga.param.args {src}: expected a text, number or boolean, got None",
        f"external-resource.gpu.amount {src}: expected a positive integer, got -2 (int)",
        f"external-resource.gpu.on-discovery-failure {src}: expected one of fail, degrade; "
        "got 'sometimes'",
        f"external-resource.gpu.vendr {src}: unknown key; did you mean "
        "'external-resource.gpu.vendor'?",
        f"external-resources {src}: 'gpu.0' is not a valid name: use letters, digits, '-' and "
        "'_', starting with a letter or digit (no dots or whitespace)",
        "rest.port (from dict): expected a port number 0..65535, got 70000 (int)",
        "scheduler.placement-policy (from -D): expected one of pack, spread; got 'random'",
        f"taskmanager.numberOfTaskSlots {src}: expected a positive integer up to 1024, got 'many'",
    ]
    assert info.value.keys == tuple(sorted(info.value.keys))


def test_an_unreadable_file_and_bad_definitions_are_reported_together(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        config_from(conf_file=missing, definitions=["amount", "taskmanager.numberOfTaskSlots=x"])
    assert info.value.keys == (str(missing), "-D amount")


@pytest.mark.parametrize(("values", "key"), [
    ({"heartbeat.interval": "5s", "heartbeat.timeout": "2s"}, "heartbeat.interval"),
    ({"heartbeat.interval": "1min"}, "heartbeat.interval"),  # the default timeout is 30 s
    ({"heartbeat.timeout": "500ms"}, "heartbeat.timeout"),  # the default interval is 1 s
    ({"heartbeat.interval": 2, "heartbeat.timeout": 2}, "heartbeat.interval"),
])
def test_heartbeat_interval_must_be_below_the_timeout(values: dict[str, Any], key: str) -> None:
    found_key, message = only_problem(values)
    assert found_key == key
    assert "heartbeat.interval" in message and "heartbeat.timeout" in message
    assert "must be smaller than" in message


def test_heartbeat_problem_comes_with_every_other_problem() -> None:
    found = problems({"heartbeat.interval": "5s", "heartbeat.timeout": "2s", "rest.port": -1})
    assert set(found) == {"heartbeat.interval", "rest.port"}


def test_heartbeat_interval_below_the_timeout_is_accepted() -> None:
    config = load(**{"heartbeat.interval": "5s", "heartbeat.timeout": "20s"})
    assert (config.get(k.HEARTBEAT_INTERVAL), config.get(k.HEARTBEAT_TIMEOUT)) == (5.0, 20.0)
