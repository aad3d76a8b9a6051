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

Device memory (bytes) and quarantined devices follow the reference's rules too
(:mod:`._capacity`); a job asking for memory that first fit refuses gets the reference's
exhaustive search (:mod:`._packing`) before it is refused.

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
from accelflow.scheduling._capacity import Fit, Free, Plan
from accelflow.scheduling._ledger import DeviceKey
from accelflow.scheduling._model import Policy, SlotAssignment, SlotRequest, TaskExecutorOffer, natural_key
from accelflow.scheduling._packing import search, wants_memory
from accelflow.scheduling._reference import refusal
from accelflow.scheduling._tree import Tree

_Saved = tuple[int, int, dict[str, list[int]], dict[str, list[int]]]  # slots, units, units and bytes per device


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
        self._by_id: dict[str, Free] = {}
        for offer in offers:
            if offer.id in self._by_id:
                raise AccelflowInternalError(f"two offers for {offer.id}")
            self._by_id[offer.id] = Free(offer, self._unit)
        self._tree: Tree[Free] | None = None  # None: rebuilt before the next placement

    # -- membership and releases --------------------------------------------------------------
    def put(self, offer: TaskExecutorOffer) -> None:
        """Add a TaskExecutor, or replace what one offers (after a release, or when one of its
        devices is quarantined or rejoins): O(its devices + log n), or one rebuild of the tree
        before the next placement when it is new and its id sorts before another's."""
        self._widen(s.denominator for d in offer.devices.values() for s in d.values())
        free = Free(offer, self._unit)
        self._by_id[offer.id] = free
        if self._tree is not None and self._tree.set(offer.id, free) is None:
            self._tree = None

    def release(
        self, taskexecutor: str, shares: Mapping[DeviceKey, Fraction] | None = None, slots: int = 0,
        memory: Mapping[DeviceKey, int] | None = None,
    ) -> None:
        """Give back ``slots``, ``shares`` and ``memory`` (bytes) of ``taskexecutor`` (a
        subtask or an attempt ended): O(shares + log n). A TaskExecutor removed meanwhile is no
        error; what a quarantined device gets back waits until it rejoins."""
        free = self._by_id.get(taskexecutor)
        if free is None:
            return
        shares = shares or {}
        memory = memory or {}
        self._widen(s.denominator for s in shares.values())
        unit = self._unit
        free.slots += slots
        for device in {*shares, *memory}:
            share = shares.get(device, Fraction(0))
            free.give_back(device, share.numerator * (unit // share.denominator), memory.get(device, 0))
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
        plans: dict[tuple[int, ...], Plan] = {}  # by the identity of the subtasks' profiles
        saved: dict[str, _Saved] = {}  # what the TaskExecutors taken from had: to undo a refusal
        result = []
        for request in requests:
            kind = tuple([id(s.profile) for s in request.subtasks])
            plan = plans.get(kind)
            if plan is None:
                plan = plans[kind] = Plan(request, self._unit, spread, tree)
            fitted = None
            if plan.checks is not None:
                fitted = tree.best(plan.checks, plan.fit) if spread else tree.leftmost(plan.checks, plan.fit, plan.resume)
            if fitted is None:
                left = self.offers()
                self._restore(saved, tree)
                return self._search(requests, request, left, policy)
            result.append(self._take(request, plan, fitted, saved, tree))
        return result

    def _search(self, requests: Sequence[SlotRequest], refused: SlotRequest,
                left: list[TaskExecutorOffer], policy: Policy) -> list[SlotAssignment]:
        """After first fit refused ``refused`` (``left``: the capacity then): the reference's
        exhaustive search for a job that asks for memory; else, or when it finds nothing, the
        refusal."""
        note = []
        if wants_memory(requests):
            searched = search(requests, self.offers())
            if searched.assignments is not None:
                for assignment in searched.assignments:
                    self._apply(assignment)
                return searched.assignments
            note = [searched.note()]
        raise refusal(refused, left, policy, note)

    def _take(self, request: SlotRequest, plan: Plan, fitted: tuple[Free, Fit],
              saved: dict[str, _Saved], tree: Tree[Free]) -> SlotAssignment:
        free, (trial, trial_mem, used, taken) = fitted
        if free.id not in saved:
            saved[free.id] = (free.slots, free.total, dict(free.free), dict(free.mem))
        free.free.update(trial)
        free.mem.update(trial_mem)
        free.slots -= 1
        free.total -= used
        rank = tree.set(free.id, free)
        if rank is None:  # it only shrank, so it keeps its place in the tree
            raise AccelflowInternalError(f"{free.id} left the capacity tree")
        if plan.monotone:
            plan.resume = rank
        subtasks = request.subtasks
        shares = {subtasks[i].holder: {key: share for key, share, _ in mine} for i, mine in zip(plan.order, taken)}
        if not trial_mem:  # no device here knows its memory: nothing taken of it
            return SlotAssignment(free.id, shares)
        memory = {
            subtasks[i].holder: gone for i, mine in zip(plan.order, taken)
            if (gone := {key: b for key, _, b in mine if b})
        }
        return SlotAssignment(free.id, shares, memory)

    def _apply(self, assignment: SlotAssignment) -> None:
        """Take what a searched ``assignment`` takes (the tree follows)."""
        free, unit = self._by_id[assignment.taskexecutor], self._unit
        free.slots -= 1
        for holder, shares in assignment.shares.items():
            memory = assignment.memory.get(holder, {})
            for device, share in shares.items():
                free.give_back(device, -share.numerator * (unit // share.denominator), -memory.get(device, 0))
        self._built().set(free.id, free)

    def _restore(self, saved: dict[str, _Saved], tree: Tree[Free]) -> None:
        for te, (slots, total, free_units, free_bytes) in saved.items():
            free = self._by_id[te]
            free.slots, free.total, free.free, free.mem = slots, total, free_units, free_bytes
            tree.set(te, free)

    # -- units and the tree -------------------------------------------------------------------
    def _widen(self, denominators: Iterable[int]) -> None:
        """Make ``unit`` a multiple of every one of ``denominators`` (scaling every count)."""
        unit = math.lcm(self._unit, *denominators)
        if unit == self._unit:
            return
        factor = unit // self._unit
        for free in self._by_id.values():
            free.scale(factor)
        self._unit = unit
        self._tree = None

    def _built(self) -> Tree[Free]:
        if self._tree is None:
            self._tree = Tree(self._by_id, self._unit)
        return self._tree
