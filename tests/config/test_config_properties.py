"""Property tests: no config input, however odd, crashes with anything but a clean ConfigError,
and every problem reported names a key the user actually wrote (or the amount a listed
resource is missing)."""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelflow import ConfigError
from accelflow.config import Configuration, config_from, read_yaml
from accelflow.config.keys import KEYS, RESOURCE_SUFFIXES

NAMES = ["gpu", "fpga", "GPU", "none", "a.b", "x y", "", "gpu-2"]
SUFFIXES = [*RESOURCE_SUFFIXES, "param.path", "param.", "param.x.y", "amout", ""]

known_keys = st.sampled_from(sorted(KEYS))
resource_keys = st.builds(
    lambda name, suffix: f"external-resource.{name}.{suffix}".rstrip("."),
    st.sampled_from(NAMES), st.sampled_from(SUFFIXES),
)
junk_keys = st.text(max_size=30)
keys = st.one_of(known_keys, resource_keys, junk_keys)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-3, max_value=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["1", "0", "-1", "1.5", "none", "fail", "degrade", "gpu;fpga", "gpu",
                     "nvidia.com/gpu", "yarn.io/gpu", "a=b", "[]", "{}", "10 s",
                     "accelflow.testing:StaticDriverFactory"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)
names_values = st.one_of(
    st.lists(st.sampled_from(NAMES), max_size=4).map(";".join),
    st.lists(st.sampled_from(NAMES), max_size=3),
    values,
)
configs = st.fixed_dictionaries(
    {}, optional={"external-resources": names_values}
).flatmap(lambda base: st.dictionaries(keys, values, max_size=8).map(lambda d: {**d, **base}))

# Kept small for the default run; a one-off run with max_examples=3000 passed as well.
PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def allowed_keys(raw: dict[str, Any]) -> set[str]:
    """Keys a problem may name: the input's, or the amount of a resource the input lists."""
    listed = raw.get("external-resources")
    names = [str(n) for n in listed] if isinstance(listed, list) else str(listed).split(";")
    return set(raw) | {f"external-resource.{n.strip()}.amount" for n in names}


def check(raw: dict[str, Any], definitions: list[str] | None = None) -> Configuration | None:
    try:
        return config_from(values=raw, definitions=definitions or [])
    except ConfigError as exc:
        assert exc.problems, "a ConfigError must carry at least one problem"
        merged = dict(raw)
        for d in definitions or []:
            key, equals, value = d.partition("=")
            if equals:  # one without '=' is refused, and what was defined before stands
                merged[key.strip()] = value.strip()
        allowed = allowed_keys(merged)
        allowed |= {f"-D {d}" for d in definitions or []} | {f"-D {d!r}" for d in definitions or []}
        allowed |= {repr(key) for key in allowed}  # odd keys are shown quoted
        for problem in exc.problems:
            assert problem.key in allowed, (problem, raw)
            assert problem.message.strip(), problem
            assert "\n" not in str(problem), problem  # one line per problem
        return None


@PROPERTY_SETTINGS
@given(configs)
def test_random_config_dicts_load_or_raise_a_clean_config_error(raw: dict[str, Any]) -> None:
    config = check(raw)
    if config is not None:
        for name, spec in config.external_resources.items():
            assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name)
            assert isinstance(spec.amount, int) and spec.amount >= 1
            assert all(isinstance(v, str) for v in spec.params.values())


@PROPERTY_SETTINGS
@given(st.lists(st.one_of(st.text(max_size=40), st.builds("{}={}".format, keys, st.text(max_size=20))), max_size=6))
def test_random_definitions_load_or_raise_a_clean_config_error(definitions: list[str]) -> None:
    check({}, definitions)


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(st.one_of(st.text(max_size=200), configs.map(lambda d: yaml.safe_dump(d, allow_unicode=True))))
def test_random_yaml_text_loads_or_raises_a_clean_config_error(text: str) -> None:
    fd, path = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        try:
            raw = read_yaml(path)
        except ConfigError as exc:
            assert exc.keys == (path,)
            return
        try:
            config_from(conf_file=path)
        except ConfigError as exc:
            allowed = allowed_keys(raw)
            assert set(exc.keys) <= allowed | {repr(key) for key in allowed}, (exc.keys, raw)
    finally:
        os.unlink(path)


valid_names = st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True).filter(lambda n: n != "none"),
                       min_size=1, max_size=4, unique=True)


@PROPERTY_SETTINGS
@given(valid_names, st.data())
def test_valid_resources_round_trip(names: list[str], data: st.DataObject) -> None:
    amounts = {n: data.draw(st.integers(min_value=1, max_value=10**6)) for n in names}
    as_text = {n: data.draw(st.booleans()) for n in names}
    raw: dict[str, Any] = {"external-resources": " ; ".join(names)}
    for n in names:
        raw[f"external-resource.{n}.amount"] = str(amounts[n]) if as_text[n] else amounts[n]
        raw[f"external-resource.{n}.param.p"] = n

    config = config_from(values=raw)

    assert list(config.external_resources) == names
    assert {n: s.amount for n, s in config.external_resources.items()} == amounts
    assert {n: dict(s.params) for n, s in config.external_resources.items()} == {n: {"p": n} for n in names}
