"""The tournament tree behind :class:`~accelflow.scheduling._index.CapacityIndex`.

Leaves are TaskExecutors in natural id order (their rank); every node holds the maxima of its
subtree, one flat list per quantity (index 1 is the root, node ``n``'s children ``2n`` and
``2n + 1``, leaves from ``cap``):

* ``slots``: most free slots;
* ``most[resource]``: largest free units of one device;
* ``mem[resource]``: largest free memory of one device, in bytes;
* ``whole[resource]``: most wholly free devices (all their share and, where known, memory);
* ``key``: largest ``spread`` key, ``(free slots, free units in all, -rank)`` packed in one int
  so that a comparison is one int comparison.

A node whose maxima are below what a request needs holds no TaskExecutor for it, so searches
skip it whole. ``-1`` marks an absent TaskExecutor or resource.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from accelflow.scheduling._model import natural_key


class Capacity(Protocol):
    """What the tree reads of a TaskExecutor: free slots, per resource each device's free
    units and free and total bytes (``-1``: unknown), and the units' total."""

    slots: int
    total: int
    free: dict[str, list[int]]
    mem: dict[str, list[int]]
    mem_total: dict[str, list[int]]
    known: set[str]


C = TypeVar("C", bound=Capacity)
R = TypeVar("R")
#: what a request needs: (a quantity's list, its least value), all to hold at a node
Checks = list[tuple[list[int], int]]


class Tree(Generic[C]):
    """Maxima of free capacity over ranges of TaskExecutors in natural id order."""

    def __init__(self, frees: Mapping[str, C], unit: int) -> None:
        self.unit = unit
        self.ids = sorted(frees, key=natural_key)
        self.rank = {te: i for i, te in enumerate(self.ids)}
        self.frees: list[C | None] = [frees[te] for te in self.ids]
        self.cap = 1 << len(self.ids).bit_length()  # room to append one more, at least
        #: more than any TaskExecutor's devices can have free (``unit`` each), so (slots,
        #: units) pack in one int, however much is taken and given back
        self.span = max((unit * sum(map(len, f.free.values())) for f in frees.values()), default=0) + 1
        size = 2 * self.cap
        self.slots = [-1] * size
        self.key = [-1] * size
        resources = sorted({r for f in frees.values() for r in f.free})
        self.most = {r: [-1] * size for r in resources}
        #: only resources whose memory some TaskExecutor knows: most clusters' leaves skip it
        self.mem = {r: [-1] * size for r in resources if any(r in f.known for f in frees.values())}
        self.whole = {r: [-1] * size for r in resources}
        self.arrays = [self.slots, self.key, *self.most.values(), *self.mem.values(), *self.whole.values()]
        for rank, free in enumerate(self.frees):
            self._leaf(rank, free)
        for node in range(self.cap - 1, 0, -1):
            for values in self.arrays:
                values[node] = max(values[2 * node], values[2 * node + 1])

    def set(self, te: str, free: C | None) -> int | None:
        """Record what ``te`` offers now (None: gone); its rank, or None when the tree must be
        rebuilt (a new id that does not sort last, a new resource, more units than ``span``)."""
        rank = self.rank.get(te)
        if free is not None and (
            free.total >= self.span or any(r not in self.most for r in free.free)
            or any(r not in self.mem for r in free.known)
        ):
            return None
        if rank is None:
            if free is None:
                return None
            if len(self.ids) >= self.cap or (self.ids and not natural_key(te) > natural_key(self.ids[-1])):
                return None
            rank = self.rank[te] = len(self.ids)
            self.ids.append(te)
            self.frees.append(free)
        self.frees[rank] = free
        self._leaf(rank, free)
        self._up(self.cap + rank)
        return rank

    def checks(self, fractions: Mapping[str, int], wholes: Mapping[str, int],
               memories: Mapping[str, int] | None = None) -> Checks | None:
        """What a node must hold for a request needing ``fractions`` (units of one device),
        ``wholes`` (wholly free devices) and ``memories`` (bytes of one device) per resource;
        None when no TaskExecutor has one."""
        checks = []
        for needs, arrays in ((fractions, self.most), (wholes, self.whole), (memories or {}, self.mem)):
            # a memory request of a resource whose memory no TaskExecutor knows fits nowhere
            for resource, need in needs.items():
                if resource not in arrays:
                    return None
                checks.append((arrays[resource], need))
        return checks

    def leftmost(self, checks: Checks, test: Callable[[C], R | None], start: int) -> tuple[C, R] | None:
        """``pack``: the first TaskExecutor from rank ``start`` on that ``test`` accepts (the
        caller knows that none before ``start`` would)."""
        cap, frees = self.cap, self.frees
        free = frees[start] if start < len(frees) else None
        if free is not None:  # where the last request of its kind went: often still room
            fit = test(free)
            if fit is not None:
                return free, fit
        start += 1
        depth = cap.bit_length() - 1
        stack = [1]
        while stack:
            node = stack.pop()
            if not self._holds(node, checks):
                continue
            if node >= cap:
                free = frees[node - cap]
                if node - cap >= start and free is not None:
                    fit = test(free)
                    if fit is not None:
                        return free, fit
                continue
            level = node.bit_length() - 1
            if (node - (1 << level) + 1) << (depth - level) <= start:
                continue  # the whole subtree lies before start
            stack.append(2 * node + 1)
            stack.append(2 * node)
        return None

    def best(self, checks: Checks, test: Callable[[C], R | None]) -> tuple[C, R] | None:
        """``spread``: the TaskExecutor with the largest key that ``test`` accepts."""
        cap, keys, frees = self.cap, self.key, self.frees
        node = 1
        while node < cap:  # the largest key of all: taken when it fits, as it mostly does
            node <<= 1
            if keys[node] < keys[node + 1]:
                node += 1
        free = frees[node - cap] if keys[node] >= 0 else None
        fit = test(free) if free is not None else None
        if free is not None and fit is not None:
            return free, fit
        # branch and bound: a subtree whose best key is no better than the one found is skipped
        found: tuple[C, R] | None = None
        found_key = -1
        stack = [1]
        while stack:
            node = stack.pop()
            key = keys[node]
            if key <= found_key or not self._holds(node, checks):
                continue
            if node >= cap:
                free = frees[node - cap]
                fit = test(free) if free is not None else None
                if free is not None and fit is not None:
                    found, found_key = (free, fit), key
                continue
            left, right = 2 * node, 2 * node + 1
            if keys[left] > keys[right]:
                left, right = right, left
            stack.append(left)  # the better child is popped first
            stack.append(right)
        return found

    def _holds(self, node: int, checks: Checks) -> bool:
        """Whether some TaskExecutor under ``node`` may hold the request (maxima suffice)."""
        if self.slots[node] < 1:
            return False
        for values, need in checks:
            if values[node] < need:
                return False
        return True

    def _leaf(self, rank: int, free: C | None) -> None:
        node, cap, unit = self.cap + rank, self.cap, self.unit
        if free is None:
            for values in self.arrays:
                values[node] = -1
            return
        self.slots[node] = free.slots
        self.key[node] = (max(free.slots, 0) * self.span + free.total) * cap + (cap - 1 - rank)
        for resource, values in self.most.items():
            units = free.free.get(resource)
            values[node] = max(units) if units else -1
        for resource, values in self.mem.items():
            sizes = free.mem.get(resource)
            values[node] = max(sizes) if sizes and resource in free.known else -1
        for resource, values in self.whole.items():
            units = free.free.get(resource)
            if not units:
                values[node] = -1
                continue
            if resource not in free.known:
                values[node] = units.count(unit)
                continue
            sizes, totals = free.mem[resource], free.mem_total[resource]
            values[node] = sum(1 for d, u in enumerate(units) if u == unit and sizes[d] == totals[d])

    def _up(self, leaf: int) -> None:
        """Recompute the ancestors of ``leaf``, each quantity up to where it stops changing."""
        for values in self.arrays:
            node = leaf >> 1
            while node:
                a, b = values[2 * node], values[2 * node + 1]
                value = a if a >= b else b
                if values[node] == value:
                    break
                values[node] = value
                node >>= 1
