"""The plain reference placement: accelflow's first placement, kept as the specification.

For every slot request it sorts every offer by the policy and tries them in turn, building a
reason for each one it skips: obviously right, and quadratic (10,000 subtasks on 1,000
TaskExecutors take minutes with ``spread``). :func:`accelflow.scheduling.place` gives the same
decisions incrementally (:mod:`._index`); the property tests and ``benchmarks/scheduling.py``
compare the two. :func:`refusal` is also how the incremental placement explains a request that
fits nowhere: it runs only then, on the capacity left at that moment.

Model (Flink's default slot sharing): slot request *i* holds subtask *i* of every operator
chain, runs in one slot of one TaskExecutor, and all its subtasks' device requests must fit on
that TaskExecutor. A whole request (``gpu: 2``) takes fully free devices; a share
(``gpu: 0.25``) must fit on one device: the tightest that fits (``pack``) or the freest
(``spread``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction

from accelflow._errors import AllocationError
from accelflow.scheduling._amounts import ONE, ResourceProfile, format_amount
from accelflow.scheduling._explain import Reasons, describe_failure
from accelflow.scheduling._ledger import DeviceKey
from accelflow.scheduling._model import (
    Policy,
    SlotAssignment,
    SlotRequest,
    TaskExecutorOffer,
    largest_share,
    natural_key,
)


def place(
    requests: Sequence[SlotRequest], offers: Sequence[TaskExecutorOffer], policy: Policy = "pack"
) -> list[SlotAssignment]:
    """Place every slot request, all or nothing (the reference; see the module docstring).

    Raises:
        AllocationError: the first request that fits nowhere, with one reason per TaskExecutor
            and device, e.g. ``taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed``.
    """
    state = [offer.copy() for offer in offers]
    result = []
    for request in requests:
        reasons = Reasons()
        for offer in ordered(state, policy):
            shares = fit_slot(request, offer, policy, reasons)
            if shares is not None:
                result.append(SlotAssignment(offer.id, shares))
                break
        else:
            raise AllocationError(describe_failure(request, offers), reasons.lines)
    return result


def refusal(request: SlotRequest, offers: Sequence[TaskExecutorOffer], policy: Policy) -> AllocationError:
    """Why ``request`` fits none of ``offers`` (the capacity left when it was refused): the
    reference's reasons, grouped into ranges of TaskExecutors on a large cluster."""
    reasons = Reasons()
    for offer in ordered([o.copy() for o in offers], policy):
        if fit_slot(request, offer, policy, reasons) is not None:
            raise AssertionError(f"refused {request} fits {offer.id}")  # pragma: no cover
    return AllocationError(describe_failure(request, offers), reasons.readable())


def ordered(state: list[TaskExecutorOffer], policy: Policy) -> list[TaskExecutorOffer]:
    """``pack``: natural id order; ``spread``: most free slots, most free device share, id."""
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


def fit_slot(
    request: SlotRequest, offer: TaskExecutorOffer, policy: Policy, reasons: Reasons
) -> dict[Hashable, dict[DeviceKey, Fraction]] | None:
    """Fit every subtask of ``request`` on ``offer`` (taking its shares), or say why not."""
    if offer.free_slots < 1:
        why = f"no free slot ({offer.total_slots} of {offer.total_slots} used)"
        reasons.add(offer.id, [why], why)
        return None
    trial = offer.copy()
    shares: dict[Hashable, dict[DeviceKey, Fraction]] = {}
    # Largest shares first (best-fit decreasing): small shares then fill what is left, instead
    # of stranding a large one (0.3 + 0.4 + 0.3 on 0.6 and 0.4 free).
    for subtask in sorted(request.subtasks, key=largest_share, reverse=True):
        taken = _fit_profile(subtask.profile, trial, policy, reasons)
        if taken is None:
            return None
        shares[subtask.holder] = taken
    trial.free_slots -= 1
    offer.free_slots, offer.devices = trial.free_slots, trial.devices
    return shares


def _fit_profile(
    profile: ResourceProfile, offer: TaskExecutorOffer, policy: Policy, reasons: Reasons
) -> dict[DeviceKey, Fraction] | None:
    taken: dict[DeviceKey, Fraction] = {}
    for resource, amount in profile.items():
        devices = offer.devices.get(resource)
        if not devices:
            reasons.add(offer.id, [f"has no {resource}"], f"has no {resource}")
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
    reasons: Reasons,
) -> list[str] | None:
    addresses = sorted(devices, key=natural_key)
    if amount >= 1:
        whole = [a for a in addresses if devices[a] == ONE]
        if len(whole) >= amount:
            return whole[: int(amount)]
        why = f"{resource} needs {amount} whole device(s), {len(whole)} of {len(addresses)} are wholly free"
        frees = ", ".join(f"{resource} {a} has {format_amount(devices[a])} free" for a in addresses)
        reasons.add(te, [f"{why} ({frees})"], why)
        return None
    fits = [a for a in addresses if devices[a] >= amount]
    if not fits:
        needed = format_amount(amount)
        reasons.add(
            te,
            [f"{resource} {a} has {format_amount(devices[a])} free, {needed} needed" for a in addresses],
            f"{resource} has at most {format_amount(max(devices.values()))} free, {needed} needed",
        )
        return None
    if policy == "pack":
        return [min(fits, key=lambda a: (devices[a], natural_key(a)))]
    return [min(fits, key=lambda a: (-devices[a], natural_key(a)))]
