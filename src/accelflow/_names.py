"""Name rules of Kubernetes and YARN (objects, extended resources, resource types), as ``problem(value) -> str | None`` checks.

Each check returns why ``value`` breaks the rule (a sentence the caller prefixes with the
config key, file or driver it came from), or ``None`` when it is fine.
"""

from __future__ import annotations

import re

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_YARN_SERVICE_RE = re.compile(r"[a-z][a-z0-9-]*")
_YARN_TYPE_RE = re.compile(
    r"((([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)/)?"
    r"[A-Za-z]([\w.-]*)"
)


def dns_label_problem(name: str) -> str | None:
    """Rule of namespaces: a DNS-1123 label, e.g. ``ml-jobs``."""
    if len(name) > 63 or not _DNS_LABEL_RE.fullmatch(name):
        return (
            f"{name!r} is not a DNS-1123 label: at most 63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def object_name_problem(name: str) -> str | None:
    """Rule of Job and ConfigMap names: a DNS-1123 subdomain of at most 63 characters.

    (Subdomains may be 253 characters long, but the Job controller copies the Job name into
    the ``job-name`` pod label, whose values stop at 63.)
    """
    if len(name) > 63 or not _DNS_SUBDOMAIN_RE.fullmatch(name):
        return (
            f"{name!r} is not a valid object name: at most 63 lower-case letters, digits, '-' "
            "and '.', starting and ending with a letter or digit, e.g. 'train-mnist'"
        )
    return None


def label_key_problem(key: str) -> str | None:
    """Rule of label keys: an optional DNS-subdomain prefix and ``/``, then a name of 63."""
    prefix, sep, name = key.rpartition("/")
    if sep and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix)):
        return f"label prefix {prefix!r} of {key!r} is not a DNS subdomain"
    if len(name) > 63 or not _QUALIFIED_NAME_RE.fullmatch(name):
        return (
            f"label key {key!r} is not valid: the name after the optional 'prefix/' needs "
            "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
            "digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Rule of label values: empty, or up to 63 letters, digits, ``-``, ``_``, ``.``."""
    if value and (len(value) > 63 or not _QUALIFIED_NAME_RE.fullmatch(value)):
        return (
            f"label value {value!r} is not valid: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def yarn_service_name_problem(name: str) -> str | None:
    """Rule of YARN service names (Hadoop ``ServiceApiUtil``): ``[a-z][a-z0-9-]*``, 63 at most."""
    if len(name) > 63 or not _YARN_SERVICE_RE.fullmatch(name):
        return (
            f"{name!r} is not a YARN service name: at most 63 lower-case letters, digits and '-', "
            "starting with a letter (no '_'), e.g. 'train-mnist'"
        )
    return None


def kubernetes_extended_resource_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Kubernetes extended resource name, or ``None`` if it is.

    The rule (Kubernetes ``IsExtendedResourceName``): ``<domain>/<name>``, domain a DNS
    subdomain outside ``kubernetes.io``, name a qualified name of at most 63 characters.
    """
    domain, sep, short = name.partition("/")
    if not sep:
        return f"expected '<vendor-domain>/<name>' such as 'nvidia.com/gpu', got {name!r}"
    if len(domain) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(domain):
        return f"{domain!r} is not a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for Kubernetes' own resources"
    if name.startswith("requests."):
        return "names starting with 'requests.' are reserved by quotas"
    if len(short) > 63 or not _QUALIFIED_NAME_RE.fullmatch(short):
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
    if not _YARN_TYPE_RE.fullmatch(name):
        return (
            f"{name!r} is not a YARN resource type: expected an optional 'prefix/' then a name "
            "starting with a letter, e.g. 'yarn.io/gpu'"
        )
    if name in ("memory-mb", "vcores"):
        return f"{name!r} is YARN's own resource; only extended resource types can be mapped"
    return None
