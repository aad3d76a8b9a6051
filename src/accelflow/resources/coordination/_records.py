"""The records of a coordination file, the devices they are about, and where the file lives.

A record names a device by UUID when it has one, else by index (:class:`Coordinated`): the GPU
plugin's ``GPUDevice`` is one, :class:`Device` is one for any other driver.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from accelflow._errors import CoordinationError
from accelflow.resources.coordination._names import check_resource, file_name
from accelflow.resources.coordination._owner import Owner

#: the fields of a record; the device's id goes under the resource's name, which may not be one
RECORD_FIELDS = ("index", "uuid", "allocated_at", "owner")


class Coordinated(Protocol):
    """What the coordination file knows of a device: its index and, when known, its UUID.

    Records match a device by UUID when both know one, else by index; :meth:`label` names the
    device in messages.
    """

    @property
    def index(self) -> str: ...

    @property
    def uuid(self) -> str | None: ...

    def label(self) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """A device of any resource, as a driver or discovery script found it.

    Example:
        >>> Device(index="0", uuid="7eff74a0-…", kind="AMD GPU").label()
        'AMD GPU 0 (7eff74a0-…)'

    Attributes:
        index: the device's index (any non-empty text without surrounding blanks).
        uuid: its UUID, when known (then records match by UUID).
        kind: what messages call it (``"device"``, ``"FPGA"``...).
    """

    index: str
    uuid: str | None = None
    kind: str = "device"

    def __post_init__(self) -> None:
        if not isinstance(self.index, str) or not self.index or self.index != self.index.strip():
            raise ValueError(f"a device index must be non-empty text without blanks around it, got {self.index!r}")
        if self.uuid is not None and (not isinstance(self.uuid, str) or not self.uuid):
            raise ValueError(f"a device uuid must be non-empty text or None, got {self.uuid!r}")

    def label(self) -> str:
        return f"{self.kind} {self.index}" + (f" ({self.uuid})" if self.uuid else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """One record of the state: a device and the process holding it.

    Attributes:
        index: the device's index as the allocator saw it.
        uuid: its UUID, when known (then records match by UUID).
        owner: the holding process.
        allocated_at: when, as an ISO 8601 UTC timestamp.
    """

    index: str
    uuid: str | None
    owner: Owner
    allocated_at: str

    @property
    def device_id(self) -> str:
        """The identity the record is keyed by: the UUID, else ``index:<index>``."""
        return self.uuid or f"index:{self.index}"

    def matches(self, device: Coordinated) -> bool:
        """Exact match: same UUID when both know one, else same index."""
        if self.uuid is not None and device.uuid is not None:
            return self.uuid == device.uuid
        return self.index == device.index

    def to_json(self) -> dict[str, Any]:
        """The record's fields (the file adds :attr:`device_id` under the resource's name,
        e.g. ``"gpu": "GPU-8f6c…"``, for people: it is not read back)."""
        return {
            "index": self.index,
            "uuid": self.uuid,
            "allocated_at": self.allocated_at,
            "owner": self.owner.to_json(),
        }

    @classmethod
    def from_json(cls, data: object) -> Allocation:
        if not isinstance(data, dict):
            raise ValueError(f"an allocation must be an object, got {data!r}")
        index, uuid, at = data.get("index"), data.get("uuid"), data.get("allocated_at")
        if not isinstance(index, str) or not index:
            raise ValueError(f"allocation index must be a non-empty string, got {index!r}")
        if uuid is not None and (not isinstance(uuid, str) or not uuid):
            raise ValueError(f"allocation uuid must be a non-empty string or null, got {uuid!r}")
        if not isinstance(at, str):
            raise ValueError(f"allocation allocated_at must be a string, got {at!r}")
        return cls(
            index=index, uuid=uuid, owner=Owner.from_json(data.get("owner")), allocated_at=at
        )


def default_coordination_path(resource: str, temp_dir: str | None = None) -> Path:
    """The per-user default: ``<tempdir>/accelflow-<uid>/<resource>-coordination.json``.

    The directory is created with mode 0700 and must be a real directory (not a symlink)
    owned by this user that nobody else can write, so no other user can plant a symlink or
    a forged state file in it.

    Example:
        >>> default_coordination_path("fpga").name
        'fpga-coordination.json'

    Args:
        resource: the resource name, e.g. ``"gpu"``.
        temp_dir: the base directory; default :func:`tempfile.gettempdir` (``$TMPDIR`` or
            ``/tmp``).

    Raises:
        CoordinationError: the directory is unsafe or cannot be created.
        ValueError: ``resource`` is not a resource name.
    """
    name = file_name(check_resource(resource))
    base = Path(temp_dir or tempfile.gettempdir()) / f"accelflow-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise CoordinationError(
            f"cannot create the directory: {exc.strerror}", path=str(base)
        ) from exc
    _check_private_dir(base)
    return base / name


def _check_private_dir(directory: Path) -> None:
    info = os.lstat(directory)
    fix = f"remove it (rm -rf {directory}) so accelflow can recreate it, or set a coordination-file"
    if stat.S_ISLNK(info.st_mode):
        raise CoordinationError(
            f"is a symbolic link, refusing to use it; {fix}", path=str(directory)
        )
    if not stat.S_ISDIR(info.st_mode):
        raise CoordinationError(f"is not a directory; {fix}", path=str(directory))
    if info.st_uid != os.getuid():
        raise CoordinationError(
            f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()}); {fix}",
            path=str(directory),
        )
    if info.st_mode & 0o022:
        raise CoordinationError(
            f"is writable by other users (mode {stat.filemode(info.st_mode)}); "
            f"chmod 700 {directory}",
            path=str(directory),
        )
