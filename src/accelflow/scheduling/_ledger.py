"""Who holds which share of which device: the authoritative book of one cluster.

Like trio's ``CapacityLimiter``: a holder takes shares, taking the same device twice or
releasing what it does not hold is an error, and :meth:`DeviceLedger.statistics` lists the
holders. Shares are exact fractions; a device's free share stays within ``[0, 1]``.

Invariant: for every device, ``free + sum(holder shares) == 1``.
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
    """Free shares and holders of every device in the cluster."""

    def __init__(self) -> None:
        self._holders: dict[DeviceKey, dict[Hashable, Fraction]] = {}
        self._free: dict[DeviceKey, Fraction] = {}  # kept in step: O(1) free(), not O(holders)
        # every device of a TaskExecutor, and what each holder holds: so that removing one
        # TaskExecutor or releasing one holder costs what it touches, not the whole cluster.
        # A holder is a key of _held from acquire (also of no device) until it releases.
        self._by_taskexecutor: dict[str, dict[DeviceKey, None]] = {}
        self._held: dict[Hashable, dict[DeviceKey, Fraction]] = {}

    def add_devices(self, devices: Iterable[DeviceKey]) -> None:
        for device in devices:
            if device not in self._holders:
                self._holders[device] = {}
                self._free[device] = ONE
                self._by_taskexecutor.setdefault(device.taskexecutor, {})[device] = None

    def remove_taskexecutor(self, taskexecutor: str) -> None:
        """Forget a TaskExecutor's devices (it died or stopped), holders included: O(its
        devices and their holders)."""
        for device in self._by_taskexecutor.pop(taskexecutor, {}):
            for holder in self._holders.pop(device):
                del self._held[holder][device]
            del self._free[device]

    def devices(self) -> list[DeviceKey]:
        return sorted(self._holders)

    def devices_of(self, taskexecutor: str) -> list[DeviceKey]:
        """``taskexecutor``'s devices, in the order they were added: O(its devices)."""
        return list(self._by_taskexecutor.get(taskexecutor, ()))

    def free(self, device: DeviceKey) -> Fraction:
        return self._free[device]

    def holders(self, device: DeviceKey) -> Mapping[Hashable, Fraction]:
        return dict(self._holders[device])

    def acquire(self, holder: Hashable, shares: Mapping[DeviceKey, Fraction]) -> None:
        """Take ``shares`` for ``holder``, all or nothing (``{}``: a holder of no device,
        which must still :meth:`release`).

        Raises:
            AccelflowInternalError: an unknown device, a share the device does not have free,
                or a holder that already holds the device (the scheduler must never do this).
        """
        for device, share in shares.items():
            if device not in self._holders:
                raise AccelflowInternalError(f"acquire of unknown device {device}")
            if holder in self._holders[device]:
                raise AccelflowInternalError(f"{holder!r} already holds {device}")
            if share <= 0 or share > self.free(device):
                raise AccelflowInternalError(
                    f"{holder!r} asked for {share} of {device}, which has {self.free(device)} free"
                )
        held = self._held.setdefault(holder, {})
        for device, share in shares.items():
            self._holders[device][holder] = share
            self._free[device] -= share
            held[device] = share

    def release(
        self, holder: Hashable, devices: Iterable[DeviceKey] | None = None
    ) -> dict[DeviceKey, Fraction]:
        """Give back what ``holder`` holds (all of it, or only ``devices``); returns it.

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
        for device, share in held.items():
            del self._holders[device][holder]
            self._free[device] += share
            del mine[device]
        if devices is None or not mine:
            del self._held[holder]
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

    def statistics(self) -> list[dict[str, object]]:
        """One row per device: its key, free share and holders with their shares."""
        return [
            {
                "taskexecutor": d.taskexecutor,
                "resource": d.resource,
                "address": d.address,
                "free": self.free(d),
                "holders": dict(self._holders[d]),
            }
            for d in self.devices()
        ]
