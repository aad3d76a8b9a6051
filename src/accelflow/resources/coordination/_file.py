"""A host coordination file: co-located TaskExecutors never hold the same device.

Keyed by a resource name: two files side by side per resource, e.g. for ``gpu``::

    gpu-coordination.json        the state, rewritten atomically
    gpu-coordination.json.lock   the lock, created once and never replaced or deleted

The state is a versioned JSON document; its format and each record's device field are named
after the resource (``fpga-coordination.json`` holds ``"format": "accelflow-fpga-coordination"``
and ``"fpga": ...``), so the GPU file is the one accelflow always wrote::

    {"format": "accelflow-gpu-coordination", "version": 1,
     "allocations": [{"gpu": "GPU-8f6c…", "index": "0", "uuid": "GPU-8f6c…",
                      "allocated_at": "2024-05-01T12:00:00+00:00",
                      "owner": {"pid": 4242, "start_ticks": 123456,
                                "start_time": 1714564800.12, "host": "node-1",
                                "boot_id": "7b1e…", "pid_namespace": 4026531836}}]}

Invariants (each one fixes a defect of Flink's ``nvidia-gpu-discovery.sh``):

* Every read-modify-write of the state happens under ``flock(LOCK_EX)`` on the lock file.
  The lock file is never replaced, so every allocator locks the same inode; Flink's
  ``sed -i`` replaced the file it locked, and mutual exclusion was gone after a reclaim.
* A crashed holder cannot wedge or corrupt anything: the kernel drops a flock when its holder
  dies, and the state is only ever replaced whole (temp file, ``fsync``, ``os.replace``), so a
  holder killed mid-update leaves the old state or the new one, never a torn one.
* Records match devices exactly, by UUID when both sides know it, else by index: releasing
  device ``1`` never touches device ``11`` (Flink's unanchored ``sed '/1 /d'`` did).
* An owner is a process identity that survives PID reuse (:class:`Owner`); an owner that has
  already exited is refused (recording it would free its devices at once).
* The lock is waited for at most ``lock_timeout`` seconds (default
  :data:`DEFAULT_LOCK_TIMEOUT_S`, below a TaskExecutor's registration timeout); then a
  :class:`CoordinationError` names the lock file and the holder (from ``/proc/locks``), so a
  stopped (``SIGSTOP``) holder or a stranger pinning the lock cannot hang discovery silently.
* The lock file is created without any permission for "others" (0600 for the per-user default,
  0660 for an explicit path, so a group can share it): whoever can open a file can ``flock``
  it, so a file others can read could be pinned by any local user. An older 0644 lock file
  of this user is tightened when opened.
* A device is handed out only if no record holds it or every record holding it names a dead
  owner. A state file that is not this resource's, is from a newer version or does not parse
  stops allocation with a :class:`CoordinationError`; it is never overwritten or guessed around.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from accelflow._errors import CoordinationError, DiscoveryError
from accelflow.resources.coordination._lockfile import DEFAULT_LOCK_TIMEOUT_S, hold_lock, reason
from accelflow.resources.coordination._names import check_resource, format_name, noun
from accelflow.resources.coordination._owner import Liveness, Owner
from accelflow.resources.coordination._records import (
    RECORD_FIELDS, Allocation, Coordinated, default_coordination_path,
)
from accelflow.resources.coordination._shortage import shortage_message

VERSION = 1
LOCK_SUFFIX = ".lock"
MAX_STATE_BYTES = 16 << 20  # a record is ~400 bytes: room for 40,000 of them
_PRIVATE_MODE = 0o600  # per-user default files
_SHARED_STATE_MODE = 0o644  # explicit path: everyone may read who holds which device
_SHARED_LOCK_MODE = 0o660  # explicit path: the group may lock, others may not even open it


#: a device type the caller allocates (a ``GPUDevice``, a :class:`Device`...); it gets the same back
D = TypeVar("D", bound=Coordinated)


class CoordinationFile:
    """Allocates the devices of one resource for owner processes so that no two live owners
    share one.

    Example (an FPGA driver, without the GPU plugin):
        >>> ledger = CoordinationFile("/tmp/accelflow-doc/fpga-coordination.json", resource="fpga")
        >>> fpgas = [Device(index="0", kind="FPGA"), Device(index="1", kind="FPGA")]
        >>> me = Owner.of_process()
        >>> [d.index for d in ledger.allocate(fpgas, 1, me)]
        ['0']
        >>> len(ledger.release(fpgas, me))
        1

    Args:
        path: the state file; its directory is created if missing. ``None``: the per-user
            default of :func:`default_coordination_path` (``<resource>-coordination.json``).
        resource: the resource name (as in ``external-resources``): it names the default file,
            the state's format (``accelflow-<resource>-coordination``) and the devices in
            messages (``gpu``: ``GPU``).
        lock_timeout: the longest wait for the lock, in seconds.

    Raises:
        CoordinationError: the default directory is unsafe.
        ValueError: ``resource`` is not a resource name (or is a record field, such as
            ``index``), or ``lock_timeout`` is not a positive number.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        resource: str,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> None:
        if check_resource(resource) in RECORD_FIELDS:
            raise ValueError(f"resource {resource!r} cannot be coordinated: its records have a field of that name")
        if not isinstance(lock_timeout, int | float) or not 0 < lock_timeout < float("inf"):
            raise ValueError(
                f"lock_timeout must be a positive number of seconds, got {lock_timeout!r}"
            )
        self.resource = resource
        self.path = Path(path) if path is not None else default_coordination_path(resource)
        self.lock_path = self.path.with_name(self.path.name + LOCK_SUFFIX)
        self.lock_timeout = float(lock_timeout)
        self._mode = _PRIVATE_MODE if path is None else _SHARED_STATE_MODE
        self._lock_mode = _PRIVATE_MODE if path is None else _SHARED_LOCK_MODE

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, resource={self.resource!r})"

    @property
    def format(self) -> str:
        """The state's ``"format"``, e.g. ``accelflow-gpu-coordination``."""
        return format_name(self.resource)

    # -- public operations -------------------------------------------------------------------

    def allocate(self, devices: Sequence[D], amount: int, owner: Owner) -> list[D]:
        """Take ``amount`` of ``devices`` for ``owner`` and record it.

        Every record of a dead owner is dropped first. Then devices without a record are taken
        (in ``devices`` order), and only then the devices whose records were just dropped, so
        a device a crashed process left behind is reused last (as in Flink).

        Raises:
            DiscoveryError: fewer than ``amount`` are free; names every holder.
            CoordinationError: the state file is unusable, the lock stays taken, or ``owner``
                has already exited.
        """
        if amount < 1:
            raise ValueError(f"amount must be a positive integer, got {amount}")
        with self.lock():
            if owner.liveness() is Liveness.DEAD:
                kind = noun(self.resource)
                raise CoordinationError(
                    f"refusing to record {owner.describe()} as the owner of {kind}s: it has "
                    f"already exited, so the {kind}s would be free again at once (a wrapper "
                    f"script without 'exec'? the {kind} driver names the owner in its "
                    "environment)",
                    path=str(self.path),
                )
            records = self._read()
            verdicts = _liveness(records)
            kept = [r for r in records if verdicts[r.owner] is not Liveness.DEAD]
            never = [d for d in devices if not any(r.matches(d) for r in records)]
            reclaimable = [
                d for d in devices if d not in never and not any(r.matches(d) for r in kept)
            ]
            taken = (never + reclaimable)[:amount]
            if len(taken) < amount:
                if len(kept) != len(records):
                    self._write(kept)
                raise DiscoveryError(shortage_message(
                    self.path, noun(self.resource), devices, amount, taken, kept, verdicts, owner))
            now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            fresh = [
                Allocation(index=d.index, uuid=d.uuid, owner=owner, allocated_at=now) for d in taken
            ]
            self._write(kept + fresh)
        return taken

    def release(self, devices: Sequence[Coordinated], owner: Owner) -> list[Allocation]:
        """Drop ``owner``'s records of ``devices``; returns the dropped records.

        Records of the same devices held by another process are left alone.
        """
        return self._drop(
            lambda r: r.owner.same_process(owner) and any(r.matches(d) for d in devices)
        )

    def release_owner(self, owner: Owner) -> list[Allocation]:
        """Drop every record of ``owner`` (e.g. at a TaskExecutor's clean shutdown)."""
        return self._drop(lambda r: r.owner.same_process(owner))

    def allocations(self) -> list[Allocation]:
        """The current records (read under the lock)."""
        with self.lock():
            return self._read()

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the exclusive lock for the block (waits at most ``lock_timeout`` seconds).

        Raises:
            CoordinationError: the lock file cannot be opened, is not a regular file, or stays
                locked by another process for ``lock_timeout`` seconds.
        """
        self._ensure_directory()
        with hold_lock(self.lock_path, mode=self._lock_mode, timeout=self.lock_timeout):
            yield

    # -- state file ----------------------------------------------------------------------------

    def _drop(self, predicate: Callable[[Allocation], bool]) -> list[Allocation]:
        with self.lock():
            records = self._read()
            dropped = [r for r in records if predicate(r)]
            if dropped:
                self._write([r for r in records if not predicate(r)])
        return dropped

    def _read(self) -> list[Allocation]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._error(self.path, f"cannot read the state: {reason(exc)}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen: a directory raises there
                raise self._corrupt("it is not a regular file (a directory?)")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(MAX_STATE_BYTES + 1)
        except OSError as exc:
            raise self._error(self.path, f"cannot read the state: {reason(exc)}") from exc
        finally:
            os.close(fd)
        if len(data) > MAX_STATE_BYTES:
            raise self._corrupt(f"it is larger than {MAX_STATE_BYTES >> 20} MiB")
        if not data.strip():
            return []
        return self._parse(data)

    def _parse(self, data: bytes) -> list[Allocation]:
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._corrupt(f"it is not JSON ({exc}); it starts with {data[:80]!r}") from None
        except RecursionError:
            raise self._corrupt(
                f"it nests too deeply to be a coordination state; it starts with {data[:80]!r}"
            ) from None
        if not isinstance(document, dict) or document.get("format") != self.format:
            raise self._corrupt(
                f"it is not an accelflow {noun(self.resource)} coordination file "
                f'(no "format": "{self.format}")'
            )
        if document.get("version") != VERSION:
            raise self._corrupt(
                f"it has version {document.get('version')!r}; this accelflow reads version "
                f"{VERSION} (a newer accelflow wrote it? use one version per host)"
            )
        records = document.get("allocations")
        if not isinstance(records, list):
            raise self._corrupt('"allocations" is not a list')
        try:
            return [Allocation.from_json(r) for r in records]
        except ValueError as exc:
            raise self._corrupt(f"a record is malformed: {exc}") from None

    def _write(self, records: Sequence[Allocation]) -> None:
        document = {
            "format": self.format,
            "version": VERSION,
            "allocations": [{self.resource: r.device_id, **r.to_json()} for r in records],
        }
        payload = (json.dumps(document, indent=2) + "\n").encode()
        directory = self.path.parent
        try:
            fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{self.path.name}.", suffix=".tmp")
        except OSError as exc:
            raise self._error(self.path, f"cannot write the state: {reason(exc)}") from exc
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fchmod(f.fileno(), self._mode)
                os.fsync(f.fileno())
            os.replace(temp, self.path)
        except BaseException as exc:
            Path(temp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise self._error(self.path, f"cannot write the state: {reason(exc)}") from exc
            raise
        # The directory is not fsynced: only a host crash can lose the rename, and after one
        # every recorded owner is dead (new boot id), so the older state it brings back is
        # reclaimed just the same. The data fsync above keeps the file from being torn.

    def _ensure_directory(self) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(
                self.path.parent, f"cannot create the directory: {reason(exc)}"
            ) from exc

    # -- messages ------------------------------------------------------------------------------

    def _error(self, path: Path, message: str) -> CoordinationError:
        return CoordinationError(message, path=str(path))

    def _corrupt(self, why: str) -> CoordinationError:
        kind = noun(self.resource)
        return CoordinationError(
            f"unusable {kind} coordination state: {why}. No {kind} is handed out while it is "
            f"unreadable. If no TaskExecutor on this host is running, remove {self.path} "
            "(it is recreated on the next allocation); otherwise point the coordination-file "
            "setting at another path",
            path=str(self.path),
        )


def _liveness(records: Sequence[Allocation]) -> dict[Owner, Liveness]:
    verdicts: dict[Owner, Liveness] = {}
    for record in records:
        if record.owner not in verdicts:
            verdicts[record.owner] = record.owner.liveness()
    return verdicts
