"""Build a :class:`Configuration` from YAML files, ``-D key=value`` overrides and dicts.

Every problem is collected and reported together in one :class:`accelflow.ConfigError`, one
line per key, each naming the key and where its value came from.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from accelflow._errors import ConfigError, ConfigProblem
from accelflow.config import _keys as k
from accelflow.config._model import Configuration, ExternalResourceSpec

_RESOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_YARN_TYPE = re.compile(
    r"((([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)/)?"
    r"[A-Za-z]([\w.-]*)"
)


def kubernetes_extended_resource_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Kubernetes extended resource name, or ``None`` if it is.

    The rule (Kubernetes ``IsExtendedResourceName``): ``<domain>/<name>``, domain a DNS
    subdomain outside ``kubernetes.io``, name a qualified name of at most 63 characters.
    """
    domain, sep, short = name.partition("/")
    if not sep:
        return f"expected '<vendor-domain>/<name>' such as 'nvidia.com/gpu', got {name!r}"
    if len(domain) > 253 or not _DNS_SUBDOMAIN.fullmatch(domain):
        return f"{domain!r} is not a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for Kubernetes' own resources"
    if name.startswith("requests."):
        return "names starting with 'requests.' are reserved by quotas"
    if len(short) > 63 or not _QUALIFIED_NAME.fullmatch(short):
        return (
            f"{short!r} is not a valid name: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def yarn_resource_type_problem(name: str) -> str | None:
    """Why ``name`` is not a valid YARN resource type name, or ``None`` if it is.

    The rule (Hadoop ``ResourceUtils``): an optional DNS-style prefix and ``/``, then a name
    that starts with a letter and continues with letters, digits, ``_``, ``.`` or ``-``.
    """
    if not _YARN_TYPE.fullmatch(name):
        return (
            f"{name!r} is not a YARN resource type: expected an optional 'prefix/' then a name "
            "starting with a letter, e.g. 'yarn.io/gpu'"
        )
    if name in ("memory-mb", "vcores"):
        return f"{name!r} is YARN's own resource; only extended resource types can be mapped"
    return None


def parse_definitions(definitions: Sequence[str]) -> dict[str, str]:
    """Parse ``-D key=value`` arguments.

    Raises:
        ConfigError: an argument without ``=`` or with an empty key, one line each.
    """
    values: dict[str, str] = {}
    problems = []
    for item in definitions:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            problems.append(ConfigProblem(f"-D {item}", "expected -D key=value"))
            continue
        values[key.strip()] = value.strip()
    if problems:
        raise ConfigError(problems)
    return values


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a config file of flat keys.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML, or not a mapping.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror}", key=str(file)) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", key=str(file)) from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise ConfigError(
            "expected a mapping of flat keys such as 'external-resource.gpu.amount: 1'",
            key=str(file),
        )
    return data


def load_config(
    *layers: tuple[Mapping[str, Any], str],
) -> Configuration:
    """Merge layers (later wins) and validate the result.

    Args:
        layers: ``(values, source)`` pairs, e.g. ``(read_yaml(f), f)``, ``(parse_definitions(d), "-D")``.

    Raises:
        ConfigError: every problem found, one per key.
    """
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for values, source in layers:
        for key, value in values.items():
            raw[str(key)] = value
            sources[str(key)] = source
    return _Validator(raw, sources).run()


def config_from(
    *,
    conf_file: str | os.PathLike[str] | None = None,
    definitions: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
) -> Configuration:
    """The usual layering: YAML file, then a dict, then ``-D`` overrides."""
    layers: list[tuple[Mapping[str, Any], str]] = []
    if conf_file is not None:
        layers.append((read_yaml(conf_file), str(conf_file)))
    if values:
        layers.append((dict(values), "dict"))
    if definitions:
        layers.append((parse_definitions(definitions), "-D"))
    return load_config(*layers)


class _Validator:
    def __init__(self, raw: dict[str, Any], sources: dict[str, str]) -> None:
        self.raw = raw
        self.sources = sources
        self.problems: list[ConfigProblem] = []
        self.warnings: list[str] = []
        self.values: dict[str, Any] = {}

    def problem(self, key: str, message: str) -> None:
        self.problems.append(ConfigProblem(key, message, self.sources.get(key)))

    def parse(self, key: str, parser: Any) -> Any:
        try:
            value = parser(self.raw[key])
        except ValueError as exc:
            self.problem(key, str(exc))
            return None
        self.values[key] = value
        return value

    def run(self) -> Configuration:
        names = self._resource_names()
        listed = set(names)
        resource_keys: dict[str, dict[str, str]] = {name: {} for name in names}
        for key in sorted(self.raw):
            if key in k.KEYS:
                if key != k.EXTERNAL_RESOURCES.name:
                    self.parse(key, k.KEYS[key].parse)
            elif key.startswith(k.RESOURCE_PREFIX):
                self._resource_key(key, listed, resource_keys)
            else:
                self._unknown(key, list(k.KEYS))
        specs = {name: spec for name in names if (spec := self._spec(name, resource_keys[name]))}
        self._check_unique_cluster_keys(specs)
        if self.problems:
            raise ConfigError(sorted(self.problems, key=lambda p: p.key))
        return Configuration(
            values=self.values,
            raw=self.raw,
            sources=self.sources,
            external_resources=specs,
            warnings=tuple(self.warnings),
        )

    def _resource_names(self) -> list[str]:
        key = k.EXTERNAL_RESOURCES.name
        if key not in self.raw:
            return []
        value = self.raw[key]
        items = [str(v) for v in value] if isinstance(value, list) else str(value).split(";")
        names = [item.strip() for item in items]
        if names == ["none"]:
            self.values[key] = ()
            return []
        ok: list[str] = []
        for position, name in enumerate(names, 1):
            if not name:
                self.problem(key, f"name {position} is empty (names are separated by ';')")
            elif name == "none":
                self.problem(key, "'none' alone means no resources; it cannot be a resource name")
            elif name in ok:
                self.problem(key, f"{name!r} is listed twice")
            elif not _RESOURCE_NAME.fullmatch(name):
                self.problem(
                    key,
                    f"{name!r} is not a valid name: use letters, digits, '-' and '_' "
                    "(no dots or whitespace)",
                )
            else:
                ok.append(name)
        self.values[key] = tuple(ok)
        return ok

    def _resource_key(self, key: str, listed: set[str], out: dict[str, dict[str, str]]) -> None:
        name, _, suffix = key[len(k.RESOURCE_PREFIX):].partition(".")
        if not suffix:
            self.problem(key, "expected external-resource.<name>.<setting>, e.g. .amount")
            return
        if suffix not in k.RESOURCE_SUFFIXES and not (
            suffix.startswith(k.PARAM_PREFIX) and len(suffix) > len(k.PARAM_PREFIX)
        ):
            self._unknown(key, [f"external-resource.{name}.{s}" for s in k.RESOURCE_SUFFIXES])
            return
        if name not in listed:
            self.warnings.append(
                f"{key}: resource {name!r} is not listed in external-resources; ignored"
            )
            return
        out[name][suffix] = key

    def _unknown(self, key: str, known: list[str]) -> None:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        self.problem(key, f"unknown key{hint}")

    def _spec(self, name: str, keys: dict[str, str]) -> ExternalResourceSpec | None:
        prefix = f"external-resource.{name}."
        parsed: dict[str, Any] = {}
        for suffix, key in keys.items():
            if not suffix.startswith(k.PARAM_PREFIX):
                parsed[suffix] = self.parse(key, k.RESOURCE_SUFFIXES[suffix].parse)
        params = {
            suffix[len(k.PARAM_PREFIX):]: _param_text(self.raw[key])
            for suffix, key in keys.items()
            if suffix.startswith(k.PARAM_PREFIX)
        }
        if "amount" not in keys:
            self.problem(prefix + "amount", f"resource {name!r} is listed but has no amount")
        amount = parsed.get("amount")
        k8s_key = parsed.get("kubernetes.config-key")
        vendor = parsed.get("vendor")
        if vendor and not k8s_key:
            k8s_key = f"{vendor}/{name}"
        if k8s_key and (why := kubernetes_extended_resource_problem(k8s_key)):
            self.problem(keys.get("kubernetes.config-key", prefix + "vendor"), why)
        yarn_key = parsed.get("yarn.config-key")
        if yarn_key and (why := yarn_resource_type_problem(yarn_key)):
            self.problem(keys["yarn.config-key"], why)
        selector = dict(parsed.get("kubernetes.node-selector") or {})
        if product := parsed.get("kubernetes.gpu-product"):
            selector["nvidia.com/gpu.product"] = product
        if amount is None or None in parsed.values():
            return None
        return ExternalResourceSpec(
            name=name,
            amount=amount,
            driver_factory=parsed.get("driver-factory.class"),
            params=params,
            on_discovery_failure=parsed.get("on-discovery-failure") or "fail",
            kubernetes_config_key=k8s_key,
            yarn_config_key=yarn_key,
            kubernetes_node_selector=selector,
            kubernetes_tolerations=tuple(parsed.get("kubernetes.tolerations") or ()),
            ray_resource_name=parsed.get("ray.resource-name"),
        )

    def _check_unique_cluster_keys(self, specs: dict[str, ExternalResourceSpec]) -> None:
        for attr, suffix in (
            ("kubernetes_config_key", "kubernetes.config-key"),
            ("yarn_config_key", "yarn.config-key"),
        ):
            seen: dict[str, str] = {}
            for spec in specs.values():
                value = getattr(spec, attr)
                if value is None:
                    continue
                if value in seen:
                    self.problem(
                        spec.key(suffix),
                        f"{value!r} is also the {suffix} of resource {seen[value]!r}; "
                        "each resource needs its own key",
                    )
                else:
                    seen[value] = spec.name


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

