"""What a resource name decides in host coordination: the file, its format and the words of
messages. For ``gpu`` they are those of accelflow's first coordination file, so GPU files
written before the coordination was vendor-neutral still read."""

from __future__ import annotations

import re

_RESOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # as external-resources allows


def check_resource(resource: object) -> str:
    """``resource`` if it is a resource name (as ``external-resources`` lists them).

    Raises:
        ValueError: it is not.
    """
    if not isinstance(resource, str) or not _RESOURCE.fullmatch(resource):
        raise ValueError(
            "resource must be a resource name such as 'gpu' or 'fpga' (letters, digits, '-' and "
            f"'_', starting with a letter or digit), got {resource!r}"
        )
    return resource


def noun(resource: str) -> str:
    """How messages call a device of ``resource``: ``gpu`` → ``GPU``, ``fpga`` → ``FPGA``."""
    return resource.upper()


def file_name(resource: str) -> str:
    """The state file's name: ``gpu-coordination.json`` (its lock adds ``.lock``)."""
    return f"{resource}-coordination.json"


def format_name(resource: str) -> str:
    """The state's ``"format"``: ``accelflow-gpu-coordination``, ``accelflow-fpga-coordination``."""
    return f"accelflow-{resource}-coordination"
