"""An exhaustive search for a packing, when first fit finds none for a job that asks for
device memory.

First fit is not complete: asked for 20, 60 and 24 GiB in that order with a 24 GiB and an
80 GiB device free, ``pack`` puts the 20 on the 24 GiB device (the tightest that fits), the 60
on the 80, and then the 24 fits nowhere, while 20 + 60 on the 80 and 24 on the 24 would fit.
Memory requests differ a lot in size and fleets mix device sizes, so a refusal there is worth
a second look: every
TaskExecutor with a free slot for every slot request in turn, and every device that fits each
request there (devices of one TaskExecutor with the same free share and memory are tried once:
they are interchangeable), depth first, the requests asking for the most memory first, until
a packing is found or :data:`SEARCH_BUDGET` steps (one step: one TaskExecutor or device choice, about 0.1 ms)
are spent. A job with more slot requests than free slots, or more memory asked of a resource
than its devices have free in all, is refused at once.

The guarantee: a job whose search ends within the budget is placed if any packing of it
exists, and refused otherwise. The search runs only after first fit refused, so it never
changes a decision first fit makes; jobs that ask for no memory are never searched (their
decisions stay those of first fit).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
from fractions import Fraction

from accelflow.scheduling._ledger import DeviceKey
from accelflow.scheduling._model import (
    SlotAssignment,
    SlotRequest,
    TaskExecutorOffer,
    largest_share,
    natural_key,
)
from accelflow.scheduling._rules import Ask, Device, asks, devices, give_back, take

SEARCH_BUDGET = 10_000
"""The most device choices one search makes before it gives up."""

_Fit = tuple[dict[Hashable, dict[DeviceKey, Fraction]], dict[Hashable, dict[DeviceKey, int]]]


class SearchResult:
    """What :func:`search` found: ``assignments`` (``None``: no packing found) and whether the
    search covered every packing (``complete``) or ran out of steps."""

    __slots__ = ("assignments", "complete", "steps")

    def __init__(self) -> None:
        self.assignments: list[SlotAssignment] | None = None
        self.complete = True
        self.steps = 0

    def note(self) -> str:
        """The reason line a refusal adds: what the search did."""
        if self.complete:
            return "an exhaustive search of every packing found none"
        return (f"an exhaustive search gave up after {SEARCH_BUDGET} device choices; a packing may "
                "still exist: ask for less memory or more TaskExecutors")


class _OutOfSteps(Exception):
    pass


def wants_memory(requests: Sequence[SlotRequest]) -> bool:
    """Whether any subtask of ``requests`` asks for device memory."""
    return any(s.profile.memory for r in requests for s in r.subtasks)


def search(requests: Sequence[SlotRequest], offers: Sequence[TaskExecutorOffer]) -> SearchResult:
    """Look for a placement of every request on ``offers`` (see the module docstring).

    Example: 20, 60 and 24 GiB on one TaskExecutor with a 24 GiB and an 80 GiB GPU:
        >>> from accelflow.scheduling import ResourceProfile, SubtaskRequest
        >>> GIB = 2**30
        >>> te = TaskExecutorOffer("te", 3, 3, {"gpu": {"0": Fraction(1), "1": Fraction(1)}},
        ...                        {"gpu": {"0": (24 * GIB, 24 * GIB), "1": (80 * GIB, 80 * GIB)}})
        >>> job = [SlotRequest((SubtaskRequest(n, str(n), ResourceProfile({"gpu": Fraction(0)},
        ...        {"gpu": n * GIB})),)) for n in (20, 60, 24)]
        >>> [sorted(a.shares[n]) for a, n in zip(search(job, [te]).assignments, (20, 60, 24))]
        [[DeviceKey(taskexecutor='te', resource='gpu', address='1')], \
[DeviceKey(taskexecutor='te', resource='gpu', address='1')], \
[DeviceKey(taskexecutor='te', resource='gpu', address='0')]]
    """
    result = SearchResult()
    if not _may_fit(requests, offers):
        return result
    state = {o.id: o.copy() for o in offers}
    ids = sorted(state, key=natural_key)
    order = sorted(range(len(requests)), key=lambda i: -_memory_asked(requests[i]))
    placed: dict[int, SlotAssignment] = {}

    def place_from(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        tried: set[object] = set()
        for te in ids:
            offer = state[te]
            if offer.free_slots < 1 or (kind := _kind(offer)) in tried:
                continue
            tried.add(kind)  # TaskExecutors with the same free capacity are interchangeable
            _step(result)
            offer.free_slots -= 1
            for shares, memory in _fits(requests[i], offer, result):
                placed[i] = SlotAssignment(te, shares, memory)
                if place_from(k + 1):
                    return True
            offer.free_slots += 1
        return False

    try:
        if place_from(0):
            result.assignments = [placed[i] for i in range(len(requests))]
    except _OutOfSteps:
        result.complete = False
    return result


def _memory_asked(request: SlotRequest) -> int:
    return sum(sum(s.profile.memory.values()) for s in request.subtasks)


def _may_fit(requests: Sequence[SlotRequest], offers: Sequence[TaskExecutorOffer]) -> bool:
    """Necessary: a free slot per request, and per resource as much free memory (of devices
    not quarantined) as the requests ask for in all."""
    if len(requests) > sum(max(o.free_slots, 0) for o in offers):
        return False
    asked: dict[str, int] = {}
    for request in requests:
        for subtask in request.subtasks:
            for resource, size in subtask.profile.memory.items():
                asked[resource] = asked.get(resource, 0) + size
    for resource, size in asked.items():
        free = sum(m[0] for o in offers for a, m in o.memory.get(resource, {}).items()
                   if a not in o.quarantined.get(resource, {}))
        if size > free:
            return False
    return True


def _fits(request: SlotRequest, offer: TaskExecutorOffer, result: SearchResult) -> Iterator[_Fit]:
    """Every way (up to interchangeable devices) to fit ``request``'s subtasks on ``offer``,
    each taken out of ``offer`` while it is yielded and given back after."""
    subtasks = sorted(request.subtasks, key=largest_share, reverse=True)
    flat = [(s.holder, ask) for s in subtasks for ask in asks(s.profile)]
    shares: dict[Hashable, dict[DeviceKey, Fraction]] = {s.holder: {} for s in subtasks}
    memory: dict[Hashable, dict[DeviceKey, int]] = {}

    def fit_from(k: int) -> Iterator[_Fit]:
        if k == len(flat):
            yield ({h: dict(d) for h, d in shares.items()},
                   {h: dict(d) for h, d in memory.items() if d})
            return
        holder, ask = flat[k]
        for choice in _choices(ask, devices(offer, ask.resource)):
            _step(result)
            taken = [(d, *take(offer, ask.resource, d, ask)) for d in choice]
            for device, share, mem in taken:
                key = DeviceKey(offer.id, ask.resource, device.address)
                shares[holder][key] = share
                if mem:
                    memory.setdefault(holder, {})[key] = mem
            yield from fit_from(k + 1)
            for device, share, mem in taken:
                key = DeviceKey(offer.id, ask.resource, device.address)
                del shares[holder][key]
                memory.get(holder, {}).pop(key, None)
                give_back(offer, ask.resource, device.address, share, mem)

    yield from fit_from(0)


def _step(result: SearchResult) -> None:
    result.steps += 1
    if result.steps > SEARCH_BUDGET:
        raise _OutOfSteps


def _kind(offer: TaskExecutorOffer) -> object:
    """What a slot request sees of ``offer``: equal for interchangeable TaskExecutors."""
    return offer.free_slots, tuple(
        (r, tuple(sorted(d.items())), tuple(sorted(offer.memory.get(r, {}).items())),
         tuple(sorted(offer.quarantined.get(r, {}).items())))
        for r, d in sorted(offer.devices.items())
    )


def _choices(ask: Ask, found: list[Device]) -> Iterator[tuple[Device, ...]]:
    """The devices ``ask`` may take, one choice per class of interchangeable devices."""
    fitting = [d for d in found if d.fits(ask)]
    count = int(ask.amount) if ask.whole else 1
    seen: set[tuple[object, ...]] = set()
    for choice in itertools.combinations(fitting, count):
        kind = tuple(sorted((str(d.free), d.memory or (0, 0)) for d in choice))
        if kind not in seen:
            seen.add(kind)
            yield choice
