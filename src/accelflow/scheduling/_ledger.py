"""Who holds which share of which device: the authoritative book of one cluster.

Like trio's ``CapacityLimiter``: a holder takes shares, taking the same device twice or
releasing what it does not hold is an error, and :meth:`DeviceLedger.statistics` lists the
holders. Shares are exact fractions; a device's free share stays within ``[0, 1]``.

Devices whose memory is known (``add_devices(..., memory=)``) also keep their free memory in
bytes; a holder may take memory alone (a share of ``0``). A quarantined device
(:meth:`DeviceLedger.quarantine`) keeps its holders until they release, but nobody acquires it.

Invariants: for every device, ``free + sum(holder shares) == 1``; for every device with known
memory, ``free memory + sum(holder memory) == total memory``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from accelflow._errors import AccelflowInternalError
from accelflow.scheduling._amounts import ONE


#: how the address of a device counted by amount only begins (see :func:`counted_address`)
_COUNTED_MARK = "#"


def counted_address(index: int) -> str:
    """The ledger address of the ``index``-th device of a resource counted by amount only.

    A resource without a driver, or whose discovery degraded, registers an amount and no
    devices (as in Flink); the ledger still books its shares, on stand-ins addressed so, and
    the REST API shows them as placeholders.

    Example:
        >>> counted_address(0), is_counted(counted_address(0)), is_counted("0")
        ('#0', True, False)
    """
    return f"{_COUNTED_MARK}{index}"


def is_counted(address: str) -> bool:
    """Whether ``address`` is a stand-in made by :func:`counted_address` (no real device)."""
    return address.startswith(_COUNTED_MARK)


@dataclass(frozen=True, slots=True, order=True)
class DeviceKey:
    """One device: TaskExecutor id, resource name, address (e.g. ``("te-1", "gpu", "0")``)."""

    taskexecutor: str
    resource: str
    address: str

    def __str__(self) -> str:
        return f"{self.taskexecutor}: {self.resource} {self.address}"

    @property
    def counted(self) -> bool:
        """Whether this is a stand-in of a resource counted by amount only."""
        return is_counted(self.address)


class DeviceLedger:
    """Free shares (and memory) and holders of every device in the cluster."""

    def __init__(self) -> None:
        self._holders: dict[DeviceKey, dict[Hashable, Fraction]] = {}
        self._free: dict[DeviceKey, Fraction] = {}  # kept in step: O(1) free(), not O(holders)
        # every device of a TaskExecutor, and what each holder holds: so that removing one
        # TaskExecutor or releasing one holder costs what it touches, not the whole cluster.
        # A holder is a key of _held from acquire (also of no device) until it releases.
        self._by_taskexecutor: dict[str, dict[DeviceKey, None]] = {}
        self._held: dict[Hashable, dict[DeviceKey, Fraction]] = {}
        self._memory: dict[DeviceKey, tuple[int, int]] = {}  # (free, total) bytes, where known
        self._held_memory: dict[Hashable, dict[DeviceKey, int]] = {}
        self._quarantined: dict[DeviceKey, str] = {}

    def add_devices(
        self, devices: Iterable[DeviceKey], memory: Mapping[DeviceKey, int] | None = None
    ) -> None:
        """Add wholly free devices; ``memory``: the total bytes of those whose memory is known
        (:func:`accelflow.scheduling.device_memory` of their infos)."""
        for device in devices:
            if device not in self._holders:
                self._holders[device] = {}
                self._free[device] = ONE
                self._by_taskexecutor.setdefault(device.taskexecutor, {})[device] = None
                total = (memory or {}).get(device)
                if total:
                    self._memory[device] = (total, total)

    def remove_taskexecutor(self, taskexecutor: str) -> None:
        """Forget a TaskExecutor's devices (it died or stopped), holders included: O(its
        devices and their holders)."""
        for device in self._by_taskexecutor.pop(taskexecutor, {}):
            for holder in self._holders.pop(device):
                del self._held[holder][device]
                self._held_memory.get(holder, {}).pop(device, None)
            del self._free[device]
            self._memory.pop(device, None)
            self._quarantined.pop(device, None)

    def devices(self) -> list[DeviceKey]:
        return sorted(self._holders)

    def devices_of(self, taskexecutor: str) -> list[DeviceKey]:
        """``taskexecutor``'s devices, in the order they were added: O(its devices)."""
        return list(self._by_taskexecutor.get(taskexecutor, ()))

    def free(self, device: DeviceKey) -> Fraction:
        return self._free[device]

    def memory(self, device: DeviceKey) -> tuple[int, int] | None:
        """``(free, total)`` bytes of ``device``'s memory, or ``None`` when unknown."""
        return self._memory.get(device)

    def holders(self, device: DeviceKey) -> Mapping[Hashable, Fraction]:
        return dict(self._holders[device])

    def acquire(
        self, holder: Hashable, shares: Mapping[DeviceKey, Fraction],
        memory: Mapping[DeviceKey, int] | None = None,
    ) -> None:
        """Take ``shares``, and ``memory`` (bytes of devices among ``shares`` whose memory is
        known), for ``holder``, all or nothing (``{}``: a holder of no device, which must
        still :meth:`release`). A share of ``0`` takes memory only: what
        :attr:`SlotAssignment.memory <accelflow.scheduling.SlotAssignment>` says.

        Raises:
            AccelflowInternalError: an unknown or quarantined device, a share or memory the
                device does not have free, a share of ``0`` without memory, or a holder that
                already holds the device (the scheduler must never do this).
        """
        memory = memory or {}
        if any(device not in shares for device in memory):
            raise AccelflowInternalError(f"{holder!r} takes memory of a device it takes no share of")
        for device, share in shares.items():
            self._check(holder, device, share, memory.get(device, 0))
        held = self._held.setdefault(holder, {})
        for device, share in shares.items():
            self._holders[device][holder] = share
            self._free[device] -= share
            held[device] = share
            taken = memory.get(device, 0)
            if taken:
                free, total = self._memory[device]
                self._memory[device] = (free - taken, total)
                self._held_memory.setdefault(holder, {})[device] = taken

    def _check(self, holder: Hashable, device: DeviceKey, share: Fraction, taken: int) -> None:
        if device not in self._holders:
            raise AccelflowInternalError(f"acquire of unknown device {device}")
        if device in self._quarantined:
            raise AccelflowInternalError(
                f"{holder!r} acquires {device}, which is quarantined ({self._quarantined[device]})"
            )
        if holder in self._holders[device]:
            raise AccelflowInternalError(f"{holder!r} already holds {device}")
        if share < 0 or share > self.free(device) or (share == 0 and taken <= 0):
            raise AccelflowInternalError(
                f"{holder!r} asked for {share} of {device}, which has {self.free(device)} free"
            )
        known = self._memory.get(device)
        if taken and (known is None or not 0 < taken <= known[0]):
            have = "unknown memory" if known is None else f"{known[0]} bytes free"
            raise AccelflowInternalError(
                f"{holder!r} asked for {taken} bytes of {device}, which has {have}"
            )

    def release(
        self, holder: Hashable, devices: Iterable[DeviceKey] | None = None
    ) -> dict[DeviceKey, Fraction]:
        """Give back what ``holder`` holds (all of it, or only ``devices``), memory included;
        returns the shares given back.

        A holder that acquired nothing (no devices asked for) may release nothing. Devices of a
        TaskExecutor that was removed meanwhile are simply gone (not an error).

        Raises:
            AccelflowInternalError: ``holder`` holds nothing here (never acquired, or released
                already), or does not hold one of ``devices``; nothing is released then.
        """
        if holder not in self._held:
            raise AccelflowInternalError(
                f"{holder!r} releases devices it does not hold (never acquired or released "
                "already)"
            )
        held = self.held_by(holder)
        if devices is not None:
            wanted = set(devices)
            missing = sorted(d for d in wanted if d not in held)
            if missing:
                raise AccelflowInternalError(
                    f"{holder!r} releases {', '.join(map(str, missing))}, which it does not hold"
                )
            held = {d: s for d, s in held.items() if d in wanted}
        mine = self._held[holder]
        memory = self._held_memory.get(holder, {})
        for device, share in held.items():
            del self._holders[device][holder]
            self._free[device] += share
            del mine[device]
            taken = memory.pop(device, 0)
            if taken:
                free, total = self._memory[device]
                self._memory[device] = (free + taken, total)
        if devices is None or not mine:
            del self._held[holder]
            self._held_memory.pop(holder, None)
        return held

    def release_if_held(self, holder: Hashable) -> dict[DeviceKey, Fraction]:
        """Like :meth:`release` of everything, but a holder that holds nothing is no error.

        For cleanup paths that cannot know what was released already (e.g. cancelling a job
        whose finished subtasks gave their devices back).
        """
        if holder not in self._held:
            return {}
        return self.release(holder)

    def is_holder(self, holder: Hashable) -> bool:
        """Whether ``holder`` acquired and has not released everything yet."""
        return holder in self._held

    def held_by(self, holder: Hashable) -> dict[DeviceKey, Fraction]:
        return dict(self._held.get(holder, {}))

    def memory_held_by(self, holder: Hashable) -> dict[DeviceKey, int]:
        """The bytes ``holder`` holds of each device whose memory is known."""
        return dict(self._held_memory.get(holder, {}))

    # -- quarantine ---------------------------------------------------------------------------
    def quarantine(self, device: DeviceKey, reason: str) -> dict[Hashable, Fraction]:
        """Give ``device`` no new shares until :meth:`rejoin`; returns its holders, whose
        subtasks the caller fails (they keep their shares until they release them). Again on a
        quarantined device: the new reason replaces the old.

        Raises:
            AccelflowInternalError: an unknown device.
        """
        if device not in self._holders:
            raise AccelflowInternalError(f"quarantine of unknown device {device}")
        self._quarantined[device] = reason
        return dict(self._holders[device])

    def rejoin(self, device: DeviceKey) -> None:
        """End ``device``'s quarantine (nothing happens when it is not quarantined)."""
        self._quarantined.pop(device, None)

    def quarantined(self) -> dict[DeviceKey, str]:
        """Every quarantined device and why."""
        return dict(self._quarantined)

    def statistics(self) -> list[dict[str, object]]:
        """One row per device: its key, free share and holders with their shares; for a
        device with known memory also ``memory_free``/``memory_total`` (bytes) and
        ``holders_memory``; for a quarantined one ``quarantined`` (the reason)."""
        rows = []
        for d in self.devices():
            row: dict[str, object] = {
                "taskexecutor": d.taskexecutor, "resource": d.resource, "address": d.address,
                "free": self.free(d), "holders": dict(self._holders[d]),
            }
            if d in self._memory:
                row["memory_free"], row["memory_total"] = self._memory[d]
                row["holders_memory"] = {
                    h: taken for h in self._holders[d]
                    if (taken := self._held_memory.get(h, {}).get(d, 0))
                }
            if d in self._quarantined:
                row["quarantined"] = self._quarantined[d]
            rows.append(row)
        return rows
