"""Build a :class:`Configuration` from YAML files, ``-D key=value`` overrides and dicts.

Every problem is collected and reported together in one :class:`accelflow.ConfigError`, one
line per key, each naming the key and where its value came from.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from accelflow._errors import ConfigError, ConfigProblem
from accelflow._names import kubernetes_extended_resource_problem, yarn_resource_type_problem
from accelflow.config import keys as k
from accelflow.config._model import Configuration, ExternalResourceSpec
from accelflow.config._read import read_definitions, read_yaml_layer, shown_key

_RESOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def load_config(
    *layers: tuple[Mapping[str, Any], str],
) -> Configuration:
    """Merge layers (later wins) and validate the result.

    Args:
        layers: ``(values, source)`` pairs, e.g. ``(read_yaml(f), f)``, ``(parse_definitions(d), "-D")``.

    Raises:
        ConfigError: every problem found, one per key.
    """
    return _load(layers, [])


def _load(layers: Sequence[tuple[Mapping[str, Any], str]], problems: list[ConfigProblem]) -> Configuration:
    """:func:`load_config`, reporting ``problems`` (found while reading the layers) with the rest."""
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    spelled: dict[str, str] = {}  # canonical name -> the alias it was last given as
    problems = list(problems)
    for values, source in layers:
        given: dict[str, tuple[str, Any]] = {}  # canonical name -> (name as given, value), this layer
        for key, value in values.items():
            name = str(key)
            canonical = k.canonical_name(name)
            if canonical in given and given[canonical][0] != name:
                other, before = given[canonical]
                if before != value:
                    problems.append(_alias_conflict({other: before, name: value}, canonical, source))
                continue
            given[canonical] = (name, value)
            raw[canonical] = value
            sources[canonical] = source
            if name != canonical:
                spelled[canonical] = name
            else:
                spelled.pop(canonical, None)
    return _Validator(raw, sources, spelled, problems).run()


def config_from(
    *,
    base: Mapping[str, Any] | None = None,
    conf_file: str | os.PathLike[str] | None = None,
    definitions: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
) -> Configuration:
    """The usual layering: ``base`` (a session cluster's keys), YAML file, a dict, then ``-D``.

    Every problem is reported in one :class:`ConfigError`: a key set twice in the file or a
    malformed ``-D`` comes with the problems of every other key (the file's last value and the
    ``-D`` arguments that parse are checked). Only a file that cannot be read at all stops the
    keys from being checked; its problem is then reported with those of the ``-D`` arguments.
    """
    layers: list[tuple[Mapping[str, Any], str]] = []
    if base:
        layers.append((dict(base), "session cluster"))
    problems: list[ConfigProblem] = []
    unreadable: ConfigError | None = None
    if conf_file is not None:
        try:
            data, problems = read_yaml_layer(conf_file)
            layers.append((data, str(conf_file)))
        except ConfigError as exc:
            unreadable = exc
    if values:
        layers.append((dict(values), "dict"))
    if definitions:
        parsed, bad = read_definitions(definitions)
        layers.append((parsed, "-D"))
        problems += bad
    if unreadable is None:
        try:
            return _load(layers, problems)
        except ConfigError as exc:
            raise _without_follow_ons(exc, definitions) from None
    if not problems:  # the keys cannot be checked while the file is unreadable
        raise unreadable
    raise ConfigError([*unreadable.problems, *problems]) from unreadable


def _without_follow_ons(error: ConfigError, definitions: Sequence[str]) -> ConfigError:
    """``error`` less the problems of a key being unset that a ``-D key`` without ``=`` meant
    to set (e.g. "listed but has no amount" after ``-D external-resource.gpu.amount``): the
    malformed ``-D`` is the problem to fix, and it is reported."""
    meant = {d.strip() for d in definitions if "=" not in d}
    kept = [p for p in error.problems if not (p.key in meant and p.source is None)]
    return error if len(kept) == len(error.problems) else ConfigError(kept)


class _Validator:
    def __init__(
        self,
        raw: dict[str, Any],
        sources: dict[str, str],
        spelled: dict[str, str] | None = None,
        problems: list[ConfigProblem] | None = None,
    ) -> None:
        self.raw = raw
        self.sources = sources
        self.spelled = spelled or {}  # canonical name -> the alias the user wrote
        self.problems: list[ConfigProblem] = list(problems or ())
        self.warnings: list[str] = []
        self.values: dict[str, Any] = {}
        # suffix -> cluster key -> [(resource, config key that set it)], in listed order
        self.cluster_keys: dict[str, dict[str, list[tuple[str, str]]]] = {}

    def problem(self, key: str, message: str) -> None:
        if key in self.spelled:  # name the key as the user wrote it
            alias = self.spelled[key]
            self.problems.append(ConfigProblem(
                shown_key(alias), f"{message} ({alias} is an alias of {key})", self.sources.get(key)
            ))
            return
        self.problems.append(ConfigProblem(shown_key(key), message, self.sources.get(key)))

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
            elif isinstance(self.raw[key], Mapping):
                self.problem(
                    key,
                    "unknown key; nested keys are not supported: write flat keys such as "
                    "'external-resource.gpu.amount: 1'",
                )
            else:
                self._unknown(key, [*k.KEYS, *k.ALIASES])
        specs = {name: spec for name in names if (spec := self._spec(name, resource_keys[name]))}
        self._check_unique_cluster_keys()
        self._check_heartbeat()
        if self.problems:
            raise ConfigError(sorted(self.problems, key=lambda p: p.key))
        return Configuration(
            values=self.values,
            raw=self.raw,
            sources=self.sources,
            external_resources=specs,
            warnings=tuple(self.warnings),
        )

    def _check_heartbeat(self) -> None:
        """``heartbeat.interval`` must be below ``heartbeat.timeout`` (Flink's heartbeat check):
        else a healthy subtask's heartbeat is older than the timeout between two beats, and it
        is killed as hung. Named under the key the user set (the interval when both are)."""
        interval, timeout = k.HEARTBEAT_INTERVAL, k.HEARTBEAT_TIMEOUT
        if not any(key.name in self.raw for key in (interval, timeout)):
            return
        if any(key.name in self.raw and key.name not in self.values for key in (interval, timeout)):
            return  # a bad value, reported already
        every = self.values.get(interval.name, interval.default)
        within = self.values.get(timeout.name, timeout.default)
        if every is not None and within is not None and every >= within:
            self.problem(
                interval.name if interval.name in self.raw else timeout.name,
                f"heartbeat.interval ({every:g} s) must be smaller than heartbeat.timeout "
                f"({within:g} s): the heartbeat timeout should be larger than the heartbeat "
                "interval, else a healthy subtask is killed as hung; raise heartbeat.timeout or "
                "lower heartbeat.interval",
            )

    def _resource_names(self) -> list[str]:
        key = k.EXTERNAL_RESOURCES.name
        if key not in self.raw:
            return []
        value = self.raw[key]
        if value is None or isinstance(value, bool):
            self.problem(
                key,
                f"expected ';'-separated names such as 'gpu;fpga' or 'none', got {value!r} "
                "(YAML reads an empty value as null and no/off as false; quote it)",
            )
            return []
        items = [str(v) for v in value] if isinstance(value, list) else str(value).split(";")
        names = [item.strip() for item in items]
        if len(names) == 1 and names[0].lower() == "none":
            self.values[key] = ()
            return []
        ok: list[str] = []
        for position, name in enumerate(names, 1):
            if not name:
                self.problem(key, f"name {position} is empty (names are separated by ';')")
            elif name.lower() == "none":
                self.problem(key, "'none' alone means no resources; it cannot be a resource name")
            elif name in ok:
                self.problem(key, f"{name!r} is listed twice")
            elif not _RESOURCE_NAME.fullmatch(name):
                self.problem(
                    key,
                    f"{name!r} is not a valid name: use letters, digits, '-' and '_', "
                    "starting with a letter or digit (no dots or whitespace)",
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
            self._unknown(key, list(k.RESOURCE_SUFFIXES), suffix, f"external-resource.{name}.")
            return
        if name not in listed:
            self.warnings.append(
                f"{key}: resource {name!r} is not listed in external-resources; ignored"
            )
            return
        out[name][suffix] = key

    def _unknown(self, key: str, known: list[str], compared: str = "", prefix: str = "") -> None:
        """Report ``key`` as unknown, suggesting the closest of ``known`` to ``compared``
        (default: the key itself), e.g. a resource key's suffix against the known suffixes."""
        close = difflib.get_close_matches(compared or key, known, n=1, cutoff=0.75)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        self.problem(key, f"unknown key{hint}")

    def _spec(self, name: str, keys: dict[str, str]) -> ExternalResourceSpec | None:
        prefix = f"external-resource.{name}."
        parsed: dict[str, Any] = {}
        for suffix, key in keys.items():
            if not suffix.startswith(k.PARAM_PREFIX):
                parsed[suffix] = self.parse(key, k.RESOURCE_SUFFIXES[suffix].parse)
        params = self._params(keys)
        if "amount" not in keys:
            self.problem(prefix + "amount", f"resource {name!r} is listed but has no amount")
        amount = parsed.get("amount")
        k8s_key = parsed.get("kubernetes.config-key")
        vendor = parsed.get("vendor")
        if vendor and not k8s_key:
            k8s_key = f"{vendor}/{name}"
        if k8s_key:
            k8s_origin = keys.get("kubernetes.config-key", prefix + "vendor")
            if why := kubernetes_extended_resource_problem(k8s_key):
                self.problem(k8s_origin, why)
            else:
                self._note_cluster_key("kubernetes.config-key", k8s_key, name, k8s_origin)
        yarn_key = parsed.get("yarn.config-key")
        if yarn_key:
            if why := yarn_resource_type_problem(yarn_key):
                self.problem(keys["yarn.config-key"], why)
            else:
                self._note_cluster_key("yarn.config-key", yarn_key, name, keys["yarn.config-key"])
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
            warm_framework=parsed.get("warm.framework") or "auto",
            warm_preload=tuple(parsed.get("warm.preload") or ()),
        )

    def _params(self, keys: dict[str, str]) -> dict[str, str]:
        params: dict[str, str] = {}
        for suffix, key in keys.items():
            if not suffix.startswith(k.PARAM_PREFIX):
                continue
            value = self.raw[key]
            if value is None or isinstance(value, Mapping | list | tuple | set):
                self.problem(key, f"expected a text, number or boolean, got {value!r}")
            else:
                params[suffix[len(k.PARAM_PREFIX):]] = _param_text(value)
        return params

    def _note_cluster_key(self, suffix: str, value: str, name: str, key: str) -> None:
        self.cluster_keys.setdefault(suffix, {}).setdefault(value, []).append((name, key))

    def _check_unique_cluster_keys(self) -> None:
        """Two resources that map to one cluster key is an error (Flink picks one at random)."""
        for suffix, by_value in self.cluster_keys.items():
            for value, users in by_value.items():
                first, *others = users
                for _name, key in others:
                    self.problem(
                        key,
                        f"{value!r} is also the {suffix} of resource {first[0]!r}; "
                        "each resource needs its own key",
                    )


def _alias_conflict(values: dict[str, Any], canonical: str, source: str) -> ConfigProblem:
    """Two names of one key (e.g. an alias and the key itself, or two aliases) set to different
    values in one layer: a problem naming both."""
    first, second = sorted(values, key=lambda name: name != canonical)  # the canonical one first
    return ConfigProblem(
        shown_key(second),
        f"{second} and {first} are names of one key, set to different values "
        f"({values[second]!r} and {values[first]!r}); set only {canonical}",
        source,
    )


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

