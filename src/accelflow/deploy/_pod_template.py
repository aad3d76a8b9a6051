"""Read a user pod template (``kubernetes.pod-template-file``) and merge ours into it.

The merge works on the serialized (camelCase) form, so fields this version of the
``kubernetes`` client does not know survive untouched. Precedence, per field:

====================================  =========================================================
ours win                              the TaskExecutor container's extended resources (requests
                                      and limits), ``command`` and ``args``, its ``image`` when
                                      ``--image``/``kubernetes.container.image`` is set, and
                                      our node-selector labels (per label)
ours win only when set in the config  the container's ``cpu``/``memory`` (``taskmanager.cpu.cores``
                                      / ``taskmanager.memory.process.size``); otherwise the
                                      template's values are kept and ours fill the gaps
merged                                ``nodeSelector`` (ours win per label), ``tolerations``
                                      (ours appended unless equal), ``volumes`` and the
                                      container's ``volumeMounts`` (ours appended; a name or
                                      mount path clash is an error), labels and annotations
                                      (the user's win per key)
kept as the user wrote it             everything else: other containers (sidecars), init
                                      containers, ``env``, ``securityContext``, ports, probes,
                                      ``serviceAccountName``, affinity, ``restartPolicy`` (Never
                                      or OnFailure; Always is refused, Jobs forbid it) ...
dropped                               ``metadata.name`` and ``metadata.namespace`` (a Job names
                                      its pods itself)
====================================  =========================================================

The TaskExecutor container is the template's container named ``accelflow-taskexecutor``
(like Flink's fixed main-container name); without one, ours is added as the first container.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml

from accelflow._errors import ConfigError, ConfigProblem
from accelflow.config.keys import KUBERNETES_POD_TEMPLATE_FILE

CONTAINER_NAME = "accelflow-taskexecutor"
"""Name of the container that runs ``accelflow run`` (find it in a pod template by this name)."""

_JOB_RESTART_POLICIES = ("Never", "OnFailure")


class _Culprit:
    """Raises ConfigErrors that name the config key, the file and the path inside it."""

    def __init__(self, path: str, source: str | None) -> None:
        self.path = path
        self.source = source

    def fail(self, where: str, why: str) -> NoReturn:
        place = f"{self.path}: {where}: " if where else f"{self.path}: "
        problem = ConfigProblem(KUBERNETES_POD_TEMPLATE_FILE.name, place + why, self.source)
        raise ConfigError([problem])

    def mapping(self, value: object, where: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self.fail(where, f"expected a mapping, got {_kind(value)}")
        return value

    def mappings(self, value: object, where: str) -> list[dict[str, Any]]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(where, f"expected a list, got {_kind(value)}")
        return [self.mapping(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def load_pod_template(path: str, *, source: str | None = None) -> dict[str, Any]:
    """Read a pod template file and return it as a pod template spec ``{metadata, spec}``.

    Accepted forms: a ``Pod`` (as in Flink's pod templates), a ``PodTemplate``
    (``template: {metadata, spec}``), or a bare pod template spec (``metadata``/``spec``).

    Example:
        A file ``pod.yaml`` with ``kind: Pod``, ``metadata.labels.team: ml`` and a sidecar
        container gives ``{"metadata": {"labels": {"team": "ml"}}, "spec": {"containers":
        [...]}}``.

    Args:
        path: the file named by ``kubernetes.pod-template-file``.
        source: where that key was set (for the error), e.g. ``-D``.

    Raises:
        ConfigError: the file cannot be read, is not YAML, not a mapping, or a field this
            merge touches has the wrong shape; the message names the key, file and field.
    """
    culprit = _Culprit(path, source)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        culprit.fail("", f"cannot read the pod template: {exc.strerror or exc}")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        culprit.fail(where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}")
    document = culprit.mapping(data, "")
    if not document:
        culprit.fail("", "empty; expected a Pod, e.g. 'kind: Pod' with 'spec.containers'")
    template = _template_of(document, culprit)
    _check_shape(template, culprit)
    return copy.deepcopy(template)


def _template_of(document: dict[str, Any], culprit: _Culprit) -> dict[str, Any]:
    kind = document.get("kind")
    if kind == "PodTemplate":
        return culprit.mapping(document.get("template"), "template")
    if kind not in (None, "Pod"):
        culprit.fail("kind", f"expected Pod or PodTemplate, got {kind!r}")
    if "spec" not in document and "metadata" not in document:
        culprit.fail("", "expected a Pod with 'metadata' and 'spec' (the pod spec goes in 'spec')")
    return {name: document[name] for name in ("metadata", "spec") if name in document}


def _check_shape(template: dict[str, Any], culprit: _Culprit) -> None:
    metadata = culprit.mapping(template.get("metadata"), "metadata")
    for name in ("labels", "annotations"):
        culprit.mapping(metadata.get(name), f"metadata.{name}")
    spec = culprit.mapping(template.get("spec"), "spec")
    culprit.mapping(spec.get("nodeSelector"), "spec.nodeSelector")
    culprit.mappings(spec.get("tolerations"), "spec.tolerations")
    culprit.mappings(spec.get("volumes"), "spec.volumes")
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in _JOB_RESTART_POLICIES:
        culprit.fail(
            "spec.restartPolicy", f"a Job's pods must use Never or OnFailure, got {policy!r}"
        )
    for i, container in enumerate(culprit.mappings(spec.get("containers"), "spec.containers")):
        where = f"spec.containers[{i}]"
        if not isinstance(container.get("name"), str):
            culprit.fail(f"{where}.name", "every container needs a name")
        resources = culprit.mapping(container.get("resources"), f"{where}.resources")
        for name in ("requests", "limits"):
            culprit.mapping(resources.get(name), f"{where}.resources.{name}")
        culprit.mappings(container.get("volumeMounts"), f"{where}.volumeMounts")


def merge_pod_template(
    user: Mapping[str, Any],
    ours: Mapping[str, Any],
    *,
    user_may_keep: Collection[str] = (),
    path: str = "pod template",
    source: str | None = None,
) -> dict[str, Any]:
    """Merge our pod template spec into the user's, with the precedence in the module doc.

    Args:
        user: from :func:`load_pod_template`.
        ours: our serialized ``V1PodTemplateSpec``; its first container is the TaskExecutor's.
        user_may_keep: resource names (``cpu``, ``memory``) whose template values are kept.
        path: the template file (for errors).
        source: where ``kubernetes.pod-template-file`` was set (for errors).

    Raises:
        ConfigError: a volume or mount of ours clashes with one in the template.
    """
    culprit = _Culprit(path, source)
    result = copy.deepcopy(dict(user))
    metadata = result.setdefault("metadata", {})
    metadata.pop("name", None)
    metadata.pop("namespace", None)
    for name in ("labels", "annotations"):
        merged = {**ours.get("metadata", {}).get(name, {}), **(metadata.get(name) or {})}
        if merged:
            metadata[name] = merged
    spec = result.setdefault("spec", {})
    _merge_pod_spec(spec, ours["spec"], user_may_keep, culprit)
    return result


def _merge_pod_spec(
    spec: dict[str, Any], ours: Mapping[str, Any], keep: Collection[str], culprit: _Culprit
) -> None:
    selector = {**(spec.get("nodeSelector") or {}), **ours.get("nodeSelector", {})}
    if selector:
        spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in ours.get("tolerations", []) if t not in tolerations]
    if tolerations:
        spec["tolerations"] = tolerations
    spec.setdefault("restartPolicy", ours["restartPolicy"])
    spec["volumes"] = _append_unique(
        spec.get("volumes") or [], ours.get("volumes", []), ("name",), "spec.volumes", culprit
    )
    containers = spec.setdefault("containers", [])
    main = ours["containers"][0]
    for i, container in enumerate(containers):
        if container.get("name") == main["name"]:
            where = f"spec.containers[{i}]"
            containers[i] = _merge_container(container, main, keep, where, culprit)
            return
    containers.insert(0, copy.deepcopy(main))


def _merge_container(
    user: dict[str, Any],
    ours: Mapping[str, Any],
    keep: Collection[str],
    where: str,
    culprit: _Culprit,
) -> dict[str, Any]:
    container = copy.deepcopy(user)
    if ours.get("image"):
        container["image"] = ours["image"]
    container["command"] = ours["command"]
    container["args"] = ours["args"]
    resources = container.setdefault("resources", {})
    requests = resources.setdefault("requests", {})
    limits = resources.setdefault("limits", {})
    for name, quantity in ours["resources"]["requests"].items():
        if name in keep and (name in requests or name in limits):
            continue
        requests[name] = quantity
        limits[name] = ours["resources"]["limits"][name]
    container["volumeMounts"] = _append_unique(
        container.get("volumeMounts") or [],
        ours.get("volumeMounts", []),
        ("name", "mountPath"),
        f"{where}.volumeMounts",
        culprit,
    )
    return container


def _append_unique(
    theirs: list[dict[str, Any]],
    ours: list[dict[str, Any]],
    fields: tuple[str, ...],
    where: str,
    culprit: _Culprit,
) -> list[dict[str, Any]]:
    for item in ours:
        for other in theirs:
            for name in fields:
                if other.get(name) == item[name]:
                    culprit.fail(
                        where,
                        f"{name} {item[name]!r} is reserved for accelflow's config volume; "
                        "rename the template's entry",
                    )
    return [*theirs, *copy.deepcopy(ours)]
