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
(``spread``). Device memory and quarantined devices follow :mod:`._rules`. When a job that asks
for device memory fits nowhere this way, :func:`._packing.search` looks for a packing that
does (first fit does not always find one that exists).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction

from accelflow._errors import AllocationError
from accelflow.scheduling._amounts import ResourceProfile
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
from accelflow.scheduling._packing import search, wants_memory
from accelflow.scheduling._rules import asks, devices, share_refusal, spread_share, take, whole_refusal

_Shares = dict[Hashable, dict[DeviceKey, Fraction]]
_Memory = dict[Hashable, dict[DeviceKey, int]]


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
            fitted = fit_slot(request, offer, policy, reasons)
            if fitted is not None:
                result.append(SlotAssignment(offer.id, *fitted))
                break
        else:
            lines = reasons.lines
            if wants_memory(requests):
                searched = search(requests, offers)
                if searched.assignments is not None:
                    return searched.assignments
                lines = [*lines, searched.note()]
            raise AllocationError(describe_failure(request, offers), lines)
    return result


def refusal(request: SlotRequest, offers: Sequence[TaskExecutorOffer], policy: Policy,
            extra: Sequence[str] = ()) -> AllocationError:
    """Why ``request`` fits none of ``offers`` (the capacity left when it was refused): the
    reference's reasons, grouped into ranges of TaskExecutors on a large cluster, then
    ``extra`` lines (what a search found)."""
    reasons = Reasons()
    for offer in ordered([o.copy() for o in offers], policy):
        if fit_slot(request, offer, policy, reasons) is not None:
            raise AssertionError(f"refused {request} fits {offer.id}")  # pragma: no cover
    return AllocationError(describe_failure(request, offers), [*reasons.readable(), *extra])


def ordered(state: list[TaskExecutorOffer], policy: Policy) -> list[TaskExecutorOffer]:
    """``pack``: natural id order; ``spread``: most free slots, most free device share (of
    devices not quarantined), id."""
    if policy == "pack":
        return sorted(state, key=lambda o: natural_key(o.id))
    return sorted(state, key=lambda o: (-o.free_slots, -spread_share(o), natural_key(o.id)))


def fit_slot(
    request: SlotRequest, offer: TaskExecutorOffer, policy: Policy, reasons: Reasons
) -> tuple[_Shares, _Memory] | None:
    """Fit every subtask of ``request`` on ``offer`` (taking its shares and memory), or say
    why not."""
    if offer.free_slots < 1:
        why = f"no free slot ({offer.total_slots} of {offer.total_slots} used)"
        reasons.add(offer.id, [why], why)
        return None
    trial = offer.copy()
    shares: _Shares = {}
    memory: _Memory = {}
    # Largest shares first (best-fit decreasing): small shares then fill what is left, instead
    # of stranding a large one (0.3 + 0.4 + 0.3 on 0.6 and 0.4 free).
    for subtask in sorted(request.subtasks, key=largest_share, reverse=True):
        taken = _fit_profile(subtask.profile, trial, policy, reasons)
        if taken is None:
            return None
        shares[subtask.holder] = taken[0]
        if taken[1]:
            memory[subtask.holder] = taken[1]
    trial.free_slots -= 1
    offer.free_slots, offer.devices, offer.memory = trial.free_slots, trial.devices, trial.memory
    return shares, memory


def _fit_profile(
    profile: ResourceProfile, offer: TaskExecutorOffer, policy: Policy, reasons: Reasons
) -> tuple[dict[DeviceKey, Fraction], dict[DeviceKey, int]] | None:
    shares: dict[DeviceKey, Fraction] = {}
    memory: dict[DeviceKey, int] = {}
    for ask in asks(profile):
        found = devices(offer, ask.resource)
        if not found:
            reasons.add(offer.id, [f"has no {ask.resource}"], f"has no {ask.resource}")
            return None
        fitting = sorted((d for d in found if d.fits(ask)), key=lambda d: d.key(ask, policy))
        count = int(ask.amount) if ask.whole else 1
        if len(fitting) < count:
            lines, why = whole_refusal(ask, found, len(fitting)) if ask.whole else share_refusal(ask, found)
            reasons.add(offer.id, lines, why)
            return None
        for device in fitting[:count]:
            key = DeviceKey(offer.id, ask.resource, device.address)
            shares[key], taken = take(offer, ask.resource, device, ask)
            if taken:
                memory[key] = taken
    return shares, memory
