"""Pure placement: slot requests plus free capacity in, assignments (or reasons) out.

Nothing here touches a process, lock or socket, so it can be tested exhaustively. The
JobManager builds :class:`TaskExecutorOffer` snapshots from its ledger, calls :func:`place`, and
then acquires the returned shares in the ledger.

Model (Flink's default slot sharing): slot request *i* holds subtask *i* of every operator
chain, runs in one slot of one TaskExecutor, and all its subtasks' device requests must fit on
that TaskExecutor. A whole request (``gpu: 2``) takes fully free devices; a share
(``gpu: 0.25``) must fit on one device.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from accelflow._errors import AllocationError
from accelflow.scheduling._amounts import ONE, ResourceProfile, format_amount
from accelflow.scheduling._ledger import DeviceKey

Policy = Literal["pack", "spread"]
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``"2"`` before ``"10"`` (Spark sorts them as strings)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


@dataclass(slots=True)
class TaskExecutorOffer:
    """Free capacity of one TaskExecutor: slots and each device's free share."""

    id: str
    free_slots: int
    total_slots: int
    devices: dict[str, dict[str, Fraction]] = field(default_factory=dict)

    def copy(self) -> TaskExecutorOffer:
        return TaskExecutorOffer(
            self.id, self.free_slots, self.total_slots,
            {r: dict(addresses) for r, addresses in self.devices.items()},
        )


@dataclass(frozen=True, slots=True)
class SubtaskRequest:
    """One subtask's device request; ``holder`` identifies it in the ledger."""

    holder: Hashable
    description: str
    profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """The subtasks that share one slot (subtask *i* of every chain)."""

    subtasks: tuple[SubtaskRequest, ...]


@dataclass(frozen=True, slots=True)
class SlotAssignment:
    taskexecutor: str
    shares: Mapping[Hashable, Mapping[DeviceKey, Fraction]]


def place(
    requests: Sequence[SlotRequest], offers: Sequence[TaskExecutorOffer], policy: Policy = "pack"
) -> list[SlotAssignment]:
    """Place every slot request, all or nothing.

    Returns:
        one assignment per request, in order.

    Raises:
        AllocationError: the first request that fits nowhere, with one reason per TaskExecutor
            and device, e.g. ``taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed``.
    """
    state = [offer.copy() for offer in offers]
    result = []
    for request in requests:
        reasons: list[str] = []
        for offer in _ordered(state, policy):
            shares = _fit_slot(request, offer, policy, reasons)
            if shares is not None:
                result.append(SlotAssignment(offer.id, shares))
                break
        else:
            raise AllocationError(_describe_failure(request, offers), reasons)
    return result


def _ordered(state: list[TaskExecutorOffer], policy: Policy) -> list[TaskExecutorOffer]:
    if policy == "pack":
        return sorted(state, key=lambda o: natural_key(o.id))
    return sorted(
        state,
        key=lambda o: (
            -o.free_slots,
            -sum((sum(a.values(), Fraction(0)) for a in o.devices.values()), Fraction(0)),
            natural_key(o.id),
        ),
    )


def _fit_slot(
    request: SlotRequest, offer: TaskExecutorOffer, policy: Policy, reasons: list[str]
) -> dict[Hashable, dict[DeviceKey, Fraction]] | None:
    if offer.free_slots < 1:
        reasons.append(f"{offer.id}: no free slot ({offer.total_slots} of {offer.total_slots} used)")
        return None
    trial = offer.copy()
    shares: dict[Hashable, dict[DeviceKey, Fraction]] = {}
    # Largest shares first (best-fit decreasing): small shares then fill what is left, instead
    # of stranding a large one (0.3 + 0.4 + 0.3 on 0.6 and 0.4 free).
    for subtask in sorted(request.subtasks, key=_largest_share, reverse=True):
        taken = _fit_profile(subtask.profile, trial, policy, reasons)
        if taken is None:
            return None
        shares[subtask.holder] = taken
    trial.free_slots -= 1
    offer.free_slots, offer.devices = trial.free_slots, trial.devices
    return shares


def _largest_share(subtask: SubtaskRequest) -> Fraction:
    return max(subtask.profile.values(), default=Fraction(0))


def _fit_profile(
    profile: ResourceProfile, offer: TaskExecutorOffer, policy: Policy, reasons: list[str]
) -> dict[DeviceKey, Fraction] | None:
    taken: dict[DeviceKey, Fraction] = {}
    for resource, amount in profile.items():
        devices = offer.devices.get(resource)
        if not devices:
            reasons.append(f"{offer.id}: has no {resource}")
            return None
        picked = _pick(resource, amount, devices, policy, offer.id, reasons)
        if picked is None:
            return None
        for address in picked:
            share = ONE if amount >= 1 else amount
            devices[address] -= share
            taken[DeviceKey(offer.id, resource, address)] = share
    return taken


def _pick(
    resource: str,
    amount: Fraction,
    devices: dict[str, Fraction],
    policy: Policy,
    te: str,
    reasons: list[str],
) -> list[str] | None:
    addresses = sorted(devices, key=natural_key)
    if amount >= 1:
        whole = [a for a in addresses if devices[a] == ONE]
        if len(whole) >= amount:
            return whole[: int(amount)]
        reasons.append(
            f"{te}: {resource} needs {amount} whole device(s), {len(whole)} of "
            f"{len(addresses)} are wholly free ({_frees(resource, addresses, devices)})"
        )
        return None
    fits = [a for a in addresses if devices[a] >= amount]
    if not fits:
        reasons.extend(
            f"{te}: {resource} {a} has {format_amount(devices[a])} free, "
            f"{format_amount(amount)} needed"
            for a in addresses
        )
        return None
    if policy == "pack":
        return [min(fits, key=lambda a: (devices[a], natural_key(a)))]
    return [min(fits, key=lambda a: (-devices[a], natural_key(a)))]


def _frees(resource: str, addresses: list[str], devices: dict[str, Fraction]) -> str:
    return ", ".join(f"{resource} {a} has {format_amount(devices[a])} free" for a in addresses)


def _describe_failure(request: SlotRequest, offers: Sequence[TaskExecutorOffer]) -> str:
    asking = [s for s in request.subtasks if s.profile]
    total = sum(o.total_slots for o in offers)
    where = f"any of {len(offers)} TaskExecutor(s) ({total} slots in all)"
    if not asking:
        names = ", ".join(s.description for s in request.subtasks)
        return (
            f"no free slot for {names} on {where}; raise taskmanager.numberOfTaskSlots or the "
            "number of TaskExecutors (local.number-taskmanager; ray.number-taskmanager on Ray), "
            "or lower the parallelism:"
        )
    asks = "; ".join(
        f"{s.description} asking for "
        + ", ".join(f"{k}: {format_amount(v)}" for k, v in s.profile.items())
        for s in asking
    )
    hints = "".join(f"; {h}" for h in missing_resource_hints(asking, offers))
    return f"cannot place {asks} on {where}{hints}:"


def missing_resource_hints(
    subtasks: Sequence[SubtaskRequest], offers: Sequence[TaskExecutorOffer]
) -> list[str]:
    """One hint per requested resource that no TaskExecutor has at all: a close name that
    some TaskExecutor has, or the keys that configure the resource.

    >>> offers = [TaskExecutorOffer("taskexecutor-1", 1, 1)]
    >>> print(missing_resource_hints([SubtaskRequest("a", "map (1/1)", {"gpu": ONE})], offers)[0])
    no TaskExecutor has a gpu: configure it with 'external-resources: gpu', \
'external-resource.gpu.amount: 1' and 'external-resource.gpu.driver-factory.class: gpu' \
(see docs/configuration.md), or check that discovery found its devices
    """
    offered = sorted({r for o in offers for r, devices in o.devices.items() if devices})
    wanted: dict[str, Fraction] = {}
    for subtask in subtasks:
        for resource, amount in subtask.profile.items():
            wanted[resource] = max(wanted.get(resource, Fraction(0)), amount)
    hints = []
    for resource, amount in wanted.items():
        if resource in offered:
            continue
        close = difflib.get_close_matches(resource, offered, n=1, cutoff=0.6)
        if close:
            hints.append(f"no TaskExecutor has a {resource}; did you mean {close[0]!r}?")
            continue
        factory = "gpu" if resource == "gpu" else "<driver factory>"
        hints.append(
            f"no TaskExecutor has a {resource}: configure it with 'external-resources: {resource}', "
            f"'external-resource.{resource}.amount: {max(1, math.ceil(amount))}' and "
            f"'external-resource.{resource}.driver-factory.class: {factory}' "
            "(see docs/configuration.md), or check that discovery found its devices"
        )
    return hints
