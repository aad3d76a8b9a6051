"""One discovered GPU (or MIG unit) and how it becomes an :class:`ExternalResourceInfo`.

Every discovery source (NVML, ``nvidia-smi``, a discovery script) produces :class:`GPUDevice`
values; the driver turns them into infos with :meth:`GPUDevice.to_info`. The info property
names are public (documented in ``docs/gpu.md``) and listed in :data:`INFO_PROPERTIES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accelflow.resources import ExternalResourceInfo

INDEX = "index"
"""The device index as ``nvidia-smi`` prints it (PCI bus order), e.g. ``"0"``; MIG units are
``"<gpu index>:<mig index>"``, e.g. ``"0:1"``. Always present (as in Flink)."""
UUID = "uuid"
"""``GPU-…`` for whole GPUs, ``MIG-…`` for MIG units; what ``CUDA_VISIBLE_DEVICES`` accepts."""
NAME = "name"
"""The product name, e.g. ``"NVIDIA A100-SXM4-80GB"``."""
MEMORY_TOTAL = "memory_total"
"""Total memory in MiB, as a decimal string, e.g. ``"81920"``."""
PCI_BUS_ID = "pci_bus_id"
"""The PCI bus id, e.g. ``"00000000:17:00.0"`` (MIG units report their parent's)."""
PARENT_INDEX = "parent_index"
"""MIG units only: the index of the physical GPU the unit lives on, e.g. ``"0"``."""
PARENT_UUID = "parent_uuid"
"""MIG units only: the UUID of the physical GPU the unit lives on."""
MIG_PROFILE = "mig_profile"
"""MIG units only, when known: the profile, e.g. ``"1g.10gb"``."""

INFO_PROPERTIES = (
    INDEX,
    UUID,
    NAME,
    MEMORY_TOTAL,
    PCI_BUS_ID,
    PARENT_INDEX,
    PARENT_UUID,
    MIG_PROFILE,
)

MAX_INDEX_DIGITS = 6
"""The most digits of a GPU index (or of each part of a MIG index), leading zeros aside."""
MAX_INDEX_CHARS = 24
"""The longest index text accepted before leading zeros are dropped (``"0000…"`` is refused)."""
_PART = rf"(?:0|[1-9][0-9]{{0,{MAX_INDEX_DIGITS - 1}}})"
_INDEX_PATTERN = re.compile(rf"{_PART}(?::{_PART})?")
_LOOSE_PATTERN = re.compile(r"([0-9]+)(?::([0-9]+))?")


def is_device_index(text: str) -> bool:
    """Whether ``text`` is a GPU index (``"3"``) or a MIG unit index (``"0:1"``), written the
    canonical way: ASCII digits, no leading zeros, at most :data:`MAX_INDEX_DIGITS` each."""
    return _INDEX_PATTERN.fullmatch(text) is not None


def normalize_index(text: str) -> str | None:
    """``text`` as a canonical index (``"007"`` → ``"7"``, ``"0:01"`` → ``"0:1"``), or
    ``None`` when it is no index or is too long (see :data:`MAX_INDEX_DIGITS`).

    Example:
        >>> normalize_index("007"), normalize_index("1" * 38), normalize_index("²")
        ('7', None, None)
    """
    match = _LOOSE_PATTERN.fullmatch(text) if len(text) <= MAX_INDEX_CHARS else None
    if match is None:
        return None
    parts = [str(int(p)) for p in match.groups() if p is not None]
    result = ":".join(parts)
    return result if is_device_index(result) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUDevice:
    """A GPU, or a MIG unit of one, as a discovery source reported it.

    Example:
        >>> GPUDevice(index="0", uuid="GPU-8f6c", memory_total_mib=81920).to_info()
        ExternalResourceInfo(index='0', memory_total='81920', uuid='GPU-8f6c')

    Attributes:
        index: ``"0"`` or, for MIG units, ``"<gpu index>:<mig index>"``.
        uuid: ``GPU-…``/``MIG-…``, when known.
        name: product name, when known.
        memory_total_mib: total memory in MiB, when known.
        pci_bus_id: PCI bus id, when known.
        parent_index: MIG units: the physical GPU's index.
        parent_uuid: MIG units: the physical GPU's UUID, when known.
        mig_profile: MIG units: the profile (``1g.10gb``), when known.
    """

    index: str
    uuid: str | None = None
    name: str | None = None
    memory_total_mib: int | None = None
    pci_bus_id: str | None = None
    parent_index: str | None = None
    parent_uuid: str | None = None
    mig_profile: str | None = None

    def __post_init__(self) -> None:
        if not is_device_index(self.index):
            raise ValueError(
                "a GPU index is a number such as '0' or '0:1' (no leading zeros, at most "
                f"{MAX_INDEX_DIGITS} digits), got {self.index[:40]!r}"
            )

    @property
    def is_mig(self) -> bool:
        """Whether this is a MIG unit rather than a whole GPU."""
        return self.parent_index is not None

    def to_info(self) -> ExternalResourceInfo:
        """The info handed to operators: every known property, nothing empty."""
        values = {
            INDEX: self.index,
            UUID: self.uuid,
            NAME: self.name,
            MEMORY_TOTAL: None if self.memory_total_mib is None else str(self.memory_total_mib),
            PCI_BUS_ID: self.pci_bus_id,
            PARENT_INDEX: self.parent_index,
            PARENT_UUID: self.parent_uuid,
            MIG_PROFILE: self.mig_profile,
        }
        return ExternalResourceInfo({k: v for k, v in values.items() if v})

    def label(self) -> str:
        """A short human-readable name for messages, e.g. ``GPU 0 (GPU-8f6c…)``."""
        kind = "MIG unit" if self.is_mig else "GPU"
        return f"{kind} {self.index}" + (f" ({self.uuid})" if self.uuid else "")
