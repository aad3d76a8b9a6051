"""Incremental placement: the cluster's free capacity kept in an index that answers "where
does this slot fit" in O(log n), with the decisions of the plain reference (:mod:`._reference`).

Two ideas make it fast and keep it exact:

* **Integer units.** Every free share and every requested share is counted in units of
  ``1/unit`` of a device, ``unit`` being the least common multiple of their denominators
  (``2`` for halves, ``12`` for halves, thirds and quarters...). Comparisons and sums are then
  on small ints, not ``Fraction`` (whose arithmetic costs microseconds), and still exact. The
  API stays in ``Fraction``: what comes back are the requested ``Fraction`` objects themselves.
  A new denominator multiplies every count once (rare: one per new kind of share).
* **A tournament tree** over the TaskExecutors in natural id order (rank). Each node keeps,
  for its subtree, the most free slots, per resource the largest free share of one device and
  the most wholly free devices, and the best ``spread`` key. ``pack`` (first fit in natural
  order) is the leftmost leaf that fits; ``spread`` (most free slots, then most free device
  share, then id) is the leaf with the largest key that fits. Subtrees that cannot hold the
  request (by those maxima) are skipped, so a search visits O(log n) nodes on a cluster where
  TaskExecutors fill alike, and taking a share updates one leaf and its ancestors, O(log n).

Within one :meth:`CapacityIndex.place` call capacity only shrinks, so a TaskExecutor that a
kind of request did not fit will not fit it later in the call: ``pack`` resumes each kind of
request where the previous one of its kind was placed (amortized O(1) per request). This holds
for slots whose subtasks ask for different resources; slots where several subtasks share a
resource (best-fit decreasing inside the slot is no monotone test) always search the tree, and
the tree's maxima are then only a necessary condition checked exactly at each leaf.

Why a tree and not a heap or ``bisect``: ``spread``'s order changes with every share taken
(a heap would do that), but a request must skip TaskExecutors that cannot hold it (no GPU,
too small a share) without popping them one by one; the tree's per-resource maxima prune them
by subtree. ``sortedcontainers`` is no dependency of accelflow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from accelflow._errors import AccelflowInternalError
from accelflow.scheduling._amounts import ONE
from accelflow.scheduling._ledger import DeviceKey
from accelflow.scheduling._model import (
    Policy,
    SlotAssignment,
    SlotRequest,
    TaskExecutorOffer,
    largest_share,
    natural_key,
)
from accelflow.scheduling._reference import refusal
from accelflow.scheduling._tree import Tree


class _Free:
    """One TaskExecutor's free capacity in units: per resource, each device's free units in
    natural address order (and its :class:`DeviceKey`), and their total."""

    __slots__ = ("id", "slots", "total_slots", "addresses", "free", "keys", "where", "total")

    def __init__(self, offer: TaskExecutorOffer, unit: int) -> None:
        self.id, self.slots, self.total_slots = offer.id, offer.free_slots, offer.total_slots
        self.addresses: dict[str, tuple[str, ...]] = {}
        self.free: dict[str, list[int]] = {}
        self.keys: dict[str, list[DeviceKey]] = {}
        for resource, devices in offer.devices.items():
            addresses = _natural(tuple(devices))
            self.addresses[resource] = addresses
            self.free[resource] = [_units(devices[a], unit, offer.id) for a in addresses]
            self.keys[resource] = [DeviceKey(offer.id, resource, a) for a in addresses]
        self.where = {key: (r, d) for r, keys in self.keys.items() for d, key in enumerate(keys)}
        self.total = sum(sum(units) for units in self.free.values())

    def offer(self, unit: int) -> TaskExecutorOffer:
        devices = {
            r: {a: Fraction(u, unit) for a, u in zip(self.addresses[r], units)}
            for r, units in self.free.items()
        }
        return TaskExecutorOffer(self.id, self.slots, self.total_slots, devices)


_NATURAL: dict[tuple[str, ...], tuple[str, ...]] = {}


def _natural(addresses: tuple[str, ...]) -> tuple[str, ...]:
    """``addresses`` in natural order (cached: most TaskExecutors have the same addresses)."""
    known = _NATURAL.get(addresses)
    if known is None:
        if len(_NATURAL) > 4096:
            _NATURAL.clear()
        known = _NATURAL[addresses] = tuple(sorted(addresses, key=natural_key))
    return known


def _units(share: Fraction, unit: int, te: str) -> int:
    numerator, denominator = share.numerator, share.denominator  # ints: Fraction's < is slow
    if numerator < 0 or numerator > denominator:
        raise AccelflowInternalError(f"{te} offers a free share of {share}, outside [0, 1]")
    return numerator * (unit // denominator)


_Taken = list[list[tuple[DeviceKey, Fraction]]]  # per fitted subtask: its devices and shares
_Fit = tuple[dict[str, list[int]], int, _Taken]  # the devices' new free units, units taken, shares
_Saved = tuple[int, int, dict[str, list[int]]]  # free slots, free units in all, per device


class _Plan:
    """One kind of slot request compiled for one :meth:`CapacityIndex.place` call: the order
    its subtasks are fitted in (largest share first), what each takes in units, the maxima a
    tree node must hold to be worth a look (``checks``, None when no TaskExecutor has a
    resource asked for), and for ``pack`` the rank from which to look (``resume``)."""

    __slots__ = ("order", "asks", "checks", "monotone", "resume", "unit", "spread")

    def __init__(self, request: SlotRequest, unit: int, spread: bool, tree: Tree[_Free]) -> None:
        subtasks = request.subtasks
        self.order = sorted(range(len(subtasks)), key=lambda i: largest_share(subtasks[i]), reverse=True)
        self.asks: list[list[tuple[str, int, int, int, Fraction]]] = []
        fractions: dict[str, int] = {}
        wholes: dict[str, int] = {}
        asked: list[str] = []
        for i in self.order:
            asks = []
            for resource, amount in subtasks[i].profile.items():
                asked.append(resource)
                if amount >= 1:  # whole devices: how many must be wholly free, how many taken
                    need = math.ceil(amount)
                    asks.append((resource, 0, need, int(amount), ONE))
                    wholes[resource] = max(wholes.get(resource, 0), need)
                else:
                    units = amount.numerator * (unit // amount.denominator)
                    asks.append((resource, units, 0, 0, amount))
                    fractions[resource] = max(fractions.get(resource, 0), units)
            self.asks.append(asks)
        self.checks = tree.checks(fractions, wholes)
        #: each resource asked by one subtask at most: the tree's maxima then decide exactly,
        #: and a TaskExecutor that refused this kind refuses it for the rest of the call
        self.monotone = len(asked) == len(set(asked))
        self.resume = 0
        self.unit, self.spread = unit, spread

    def fit(self, free: _Free) -> _Fit | None:
        """The reference's fit of one slot on one TaskExecutor, in units: the devices' new
        free units, the units taken and what each subtask takes; None when it does not fit."""
        if free.slots < 1:
            return None
        unit, spread = self.unit, self.spread
        trial: dict[str, list[int]] = {}
        used = 0
        taken: _Taken = []
        for asks in self.asks:
            mine = []
            for resource, units, need, take, share in asks:
                frees = trial.get(resource)
                if frees is None:
                    base = free.free.get(resource)
                    if not base:
                        return None
                    frees = trial[resource] = base.copy()
                if units:  # a share of one device: the tightest that fits (pack), the freest (spread)
                    pick = -1
                    for d, f in enumerate(frees):
                        if f >= units and (pick < 0 or (f > frees[pick] if spread else f < frees[pick])):
                            pick = d
                    if pick < 0:
                        return None
                    frees[pick] -= units
                    used += units
                    mine.append((free.keys[resource][pick], share))
                    continue
                whole = [d for d, f in enumerate(frees) if f == unit]
                if len(whole) < need:
                    return None
                for d in whole[:take]:
                    frees[d] = 0
                    used += unit
                    mine.append((free.keys[resource][d], share))
            taken.append(mine)
        return trial, used, taken


class CapacityIndex:
    """Free slots and device shares of a cluster, indexed for placement.

    The pure :func:`accelflow.scheduling.place` builds one from offers for one call; the
    JobManager keeps one for its cluster and updates it as TaskExecutors come and go and
    shares are released (:meth:`put`, :meth:`remove`), each in time proportional to the
    TaskExecutor that changed.

    Example:
        >>> from accelflow.scheduling import ResourceProfile, SubtaskRequest
        >>> index = CapacityIndex([TaskExecutorOffer("te-1", 2, 2, {"gpu": {"0": Fraction(1)}})])
        >>> ask = ResourceProfile({"gpu": Fraction(1, 2)})
        >>> [a.taskexecutor for a in index.place([SlotRequest((SubtaskRequest("a", "a", ask),))], "pack")]
        ['te-1']
        >>> index.offers()[0].devices
        {'gpu': {'0': Fraction(1, 2)}}
    """

    def __init__(self, offers: Iterable[TaskExecutorOffer] = ()) -> None:
        offers = list(offers)
        self._unit = math.lcm(1, *(s.denominator for o in offers for d in o.devices.values() for s in d.values()))
        self._by_id: dict[str, _Free] = {}
        for offer in offers:
            if offer.id in self._by_id:
                raise AccelflowInternalError(f"two offers for {offer.id}")
            self._by_id[offer.id] = _Free(offer, self._unit)
        self._tree: Tree[_Free] | None = None  # None: rebuilt before the next placement

    # -- membership and releases --------------------------------------------------------------
    def put(self, offer: TaskExecutorOffer) -> None:
        """Add a TaskExecutor, or replace what one offers (after a release): O(its devices +
        log n), or one rebuild of the tree before the next placement when it is new and its id
        sorts before another's."""
        self._widen(s.denominator for d in offer.devices.values() for s in d.values())
        free = _Free(offer, self._unit)
        self._by_id[offer.id] = free
        if self._tree is not None and self._tree.set(offer.id, free) is None:
            self._tree = None

    def release(
        self, taskexecutor: str, shares: Mapping[DeviceKey, Fraction] | None = None, slots: int = 0
    ) -> None:
        """Give back ``slots`` and ``shares`` of ``taskexecutor`` (a subtask or an attempt
        ended): O(shares + log n). A TaskExecutor removed meanwhile is no error."""
        free = self._by_id.get(taskexecutor)
        if free is None:
            return
        shares = shares or {}
        self._widen(s.denominator for s in shares.values())
        unit = self._unit
        free.slots += slots
        for device, share in shares.items():
            resource, d = free.where[device]
            units = share.numerator * (unit // share.denominator)
            free.free[resource][d] += units
            free.total += units
        if self._tree is not None and self._tree.set(taskexecutor, free) is None:
            self._tree = None

    def remove(self, taskexecutor: str) -> None:
        """Forget a TaskExecutor (it died or stopped): O(log n)."""
        if self._by_id.pop(taskexecutor, None) is not None and self._tree is not None:
            self._tree.set(taskexecutor, None)

    def offers(self) -> list[TaskExecutorOffer]:
        """What each TaskExecutor offers now, in natural id order (for explanations)."""
        return [self._by_id[te].offer(self._unit) for te in sorted(self._by_id, key=natural_key)]

    # -- placement ----------------------------------------------------------------------------
    def place(self, requests: Sequence[SlotRequest], policy: Policy) -> list[SlotAssignment]:
        """Place every slot request, all or nothing; on success the index holds the result.

        Raises:
            AllocationError: the first request that fits nowhere, explained on the capacity
                left at that moment (and the index is as it was before the call).
        """
        profiles = {id(s.profile): s.profile for r in requests for s in r.subtasks}
        self._widen(a.denominator for p in profiles.values() for a in p.values() if a < 1)
        tree = self._built()
        spread = policy != "pack"
        plans: dict[tuple[int, ...], _Plan] = {}  # by the identity of the subtasks' profiles
        saved: dict[str, _Saved] = {}  # what the TaskExecutors taken from had: to undo a refusal
        result = []
        for request in requests:
            kind = tuple([id(s.profile) for s in request.subtasks])
            plan = plans.get(kind)
            if plan is None:
                plan = plans[kind] = _Plan(request, self._unit, spread, tree)
            fitted = None
            if plan.checks is not None:
                fitted = tree.best(plan.checks, plan.fit) if spread else tree.leftmost(plan.checks, plan.fit, plan.resume)
            if fitted is None:
                error = refusal(request, self.offers(), policy)
                self._restore(saved, tree)
                raise error
            result.append(self._take(request, plan, fitted, saved, tree))
        return result

    def _take(self, request: SlotRequest, plan: _Plan, fitted: tuple[_Free, _Fit],
              saved: dict[str, _Saved], tree: Tree[_Free]) -> SlotAssignment:
        free, (trial, used, taken) = fitted
        if free.id not in saved:
            saved[free.id] = (free.slots, free.total, dict(free.free))
        free.free.update(trial)
        free.slots -= 1
        free.total -= used
        rank = tree.set(free.id, free)
        if rank is None:  # it only shrank, so it keeps its place in the tree
            raise AccelflowInternalError(f"{free.id} left the capacity tree")
        if plan.monotone:
            plan.resume = rank
        subtasks = request.subtasks
        return SlotAssignment(free.id, {subtasks[i].holder: dict(mine) for i, mine in zip(plan.order, taken)})

    def _restore(self, saved: dict[str, _Saved], tree: Tree[_Free]) -> None:
        for te, (slots, total, free_units) in saved.items():
            free = self._by_id[te]
            free.slots, free.total, free.free = slots, total, free_units
            tree.set(te, free)

    # -- units and the tree -------------------------------------------------------------------
    def _widen(self, denominators: Iterable[int]) -> None:
        """Make ``unit`` a multiple of every one of ``denominators`` (scaling every count)."""
        unit = math.lcm(self._unit, *denominators)
        if unit == self._unit:
            return
        factor = unit // self._unit
        for free in self._by_id.values():
            free.free = {r: [u * factor for u in units] for r, units in free.free.items()}
            free.total *= factor
        self._unit = unit
        self._tree = None

    def _built(self) -> Tree[_Free]:
        if self._tree is None:
            self._tree = Tree(self._by_id, self._unit)
        return self._tree
