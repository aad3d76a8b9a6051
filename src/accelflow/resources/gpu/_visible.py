"""``CUDA_VISIBLE_DEVICES``: the devices a TaskExecutor was already restricted to.

NVML and ``nvidia-smi`` always list every GPU of the host; CUDA inside the TaskExecutor sees
only those in ``CUDA_VISIBLE_DEVICES``. So the universe the GPU driver allocates from is the
discovered list restricted by that variable, following CUDA's rules:

* unset: every device;
* set but empty (or only blanks): no device at all (never "all", as in Ray);
* a comma list of indexes (``"0,2"``), UUIDs (``"GPU-8f6c…"``, ``"MIG-…"``) or unique UUID
  prefixes; CUDA stops at the first entry that names no device (so ``"-1"`` hides every GPU).

A whole GPU named in the list makes its MIG units visible too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from accelflow.resources.gpu._device import GPUDevice

log = logging.getLogger("accelflow.resources.gpu")

CUDA_VISIBLE_DEVICES_ENV_VAR = "CUDA_VISIBLE_DEVICES"
CUDA_DEVICE_ORDER_ENV_VAR = "CUDA_DEVICE_ORDER"


def parse_visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES``: ``None`` when unset, ``[]`` when empty.

    Example:
        >>> parse_visible_devices({"CUDA_VISIBLE_DEVICES": " 0, 2 "})
        ['0', '2']
        >>> parse_visible_devices({"CUDA_VISIBLE_DEVICES": ""}), parse_visible_devices({})
        ([], None)
    """
    raw = environ.get(CUDA_VISIBLE_DEVICES_ENV_VAR)
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def restrict_to_visible(
    devices: Sequence[GPUDevice], environ: Mapping[str, str]
) -> list[GPUDevice]:
    """The devices ``CUDA_VISIBLE_DEVICES`` lets CUDA see, in the variable's order."""
    entries = parse_visible_devices(environ)
    if entries is None:
        return list(devices)
    visible: list[GPUDevice] = []
    for entry in entries:
        matched = _match(entry, devices)
        if not matched:
            if entry != "-1":
                log.warning(
                    "%s=%r: %r names no GPU on this host; like CUDA, ignoring it and every "
                    "entry after it",
                    CUDA_VISIBLE_DEVICES_ENV_VAR,
                    environ[CUDA_VISIBLE_DEVICES_ENV_VAR],
                    entry,
                )
            break
        visible.extend(d for d in matched if d not in visible)
    return visible


def _match(entry: str, devices: Sequence[GPUDevice]) -> list[GPUDevice]:
    # a GPU with MIG on is not in `devices` (its units are): naming it names its units
    exact = [d for d in devices if entry in (d.index, d.uuid, d.parent_index, d.parent_uuid)]
    if not exact and entry.startswith(("GPU-", "MIG-")):
        prefixed = [d for d in devices if d.uuid is not None and d.uuid.startswith(entry)]
        exact = prefixed if len(prefixed) == 1 else []
    return exact
