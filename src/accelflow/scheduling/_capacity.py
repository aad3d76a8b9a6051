"""One TaskExecutor's free capacity in integer units, and one kind of slot request compiled to
fit on it: the inner loop of the incremental placement (:mod:`._index`).

The decisions are those of :mod:`._rules` (the reference's device rules), on ints: shares in
units of ``1/unit`` of a device, memory in bytes (``-1``: unknown). A quarantined device is
*parked*: its live free share and memory read ``0`` (so nothing fits it and no maximum of the
tree counts it) while its real ones are kept aside, still given back by releases, until it
rejoins.
"""

from __future__ import annotations

import math
from fractions import Fraction

from accelflow._errors import AccelflowInternalError
from accelflow.scheduling._amounts import ONE
from accelflow.scheduling._ledger import DeviceKey
from accelflow.scheduling._model import Preferences, SlotRequest, TaskExecutorOffer, largest_share, natural
from accelflow.scheduling._tree import Tree

#: per fitted subtask: its devices, shares and the bytes it takes of each
Taken = list[list[tuple[DeviceKey, Fraction, int]]]
#: the devices' new free units and bytes, units taken, what each subtask takes
Fit = tuple[dict[str, list[int]], dict[str, list[int]], int, Taken]
#: per fitted subtask, per resource, the indexes of the devices it prefers, best first
Prefer = list[dict[str, list[int]]]
_Ask = tuple[str, int, int, int, Fraction, int]  # resource, units, whole need, take, share, bytes


class Free:
    """One TaskExecutor's free capacity: per resource, each device's free units and bytes in
    natural address order (and its :class:`DeviceKey`), and the units' total."""

    __slots__ = ("id", "slots", "total_slots", "addresses", "free", "mem", "mem_total", "known",
                 "keys", "where", "total", "parked", "reasons")

    def __init__(self, offer: TaskExecutorOffer, unit: int) -> None:
        self.id, self.slots, self.total_slots = offer.id, offer.free_slots, offer.total_slots
        self.addresses: dict[str, tuple[str, ...]] = {}
        self.free: dict[str, list[int]] = {}
        self.mem: dict[str, list[int]] = {}
        self.mem_total: dict[str, list[int]] = {}
        self.known: set[str] = set()  # the resources some device of which knows its memory
        self.keys: dict[str, list[DeviceKey]] = {}
        self.parked: dict[DeviceKey, tuple[int, int]] = {}  # quarantined: real free units, bytes
        self.reasons: dict[DeviceKey, str] = {}
        for resource, devices in offer.devices.items():
            addresses = natural(tuple(devices))
            memory = offer.memory.get(resource, {})
            self.addresses[resource] = addresses
            self.free[resource] = [units(devices[a], unit, offer.id) for a in addresses]
            self.mem[resource] = [memory[a][0] if a in memory else -1 for a in addresses]
            self.mem_total[resource] = [memory[a][1] if a in memory else -1 for a in addresses]
            if memory:
                self.known.add(resource)
            self.keys[resource] = [DeviceKey(offer.id, resource, a) for a in addresses]
            for a, reason in offer.quarantined.get(resource, {}).items():
                self._park(resource, addresses.index(a), reason)
        self.where = {key: (r, d) for r, keys in self.keys.items() for d, key in enumerate(keys)}
        self.total = sum(sum(u) for u in self.free.values())

    def _park(self, resource: str, d: int, reason: str) -> None:
        key = self.keys[resource][d]
        self.parked[key] = (self.free[resource][d], self.mem[resource][d])
        self.reasons[key] = reason
        self.free[resource][d] = 0
        self.mem[resource][d] = min(self.mem[resource][d], 0)

    def give_back(self, device: DeviceKey, units_back: int, bytes_back: int) -> None:
        """A holder released ``units_back`` and ``bytes_back`` of ``device``."""
        if device in self.parked:
            parked_units, parked_bytes = self.parked[device]
            self.parked[device] = (parked_units + units_back, parked_bytes + bytes_back)
            return
        resource, d = self.where[device]
        self.free[resource][d] += units_back
        self.total += units_back
        if bytes_back:
            self.mem[resource][d] += bytes_back

    def scale(self, factor: int) -> None:
        """Count in units ``factor`` times smaller."""
        self.free = {r: [u * factor for u in us] for r, us in self.free.items()}
        self.parked = {k: (u * factor, b) for k, (u, b) in self.parked.items()}
        self.total *= factor

    def offer(self, unit: int) -> TaskExecutorOffer:
        """What this TaskExecutor offers, as the reference reads it."""
        devices: dict[str, dict[str, Fraction]] = {}
        memory: dict[str, dict[str, tuple[int, int]]] = {}
        quarantined: dict[str, dict[str, str]] = {}
        for r, free_units in self.free.items():
            shares, sizes = devices.setdefault(r, {}), {}
            for a, key, u, b, total in zip(self.addresses[r], self.keys[r], free_units, self.mem[r], self.mem_total[r]):
                if key in self.parked:
                    u, b = self.parked[key]
                    quarantined.setdefault(r, {})[a] = self.reasons[key]
                shares[a] = Fraction(u, unit)
                if total >= 0:
                    sizes[a] = (b, total)
            if sizes:
                memory[r] = sizes
        return TaskExecutorOffer(self.id, self.slots, self.total_slots, devices, memory, quarantined)


def units(share: Fraction, unit: int, te: str) -> int:
    numerator, denominator = share.numerator, share.denominator  # ints: Fraction's < is slow
    if numerator < 0 or numerator > denominator:
        raise AccelflowInternalError(f"{te} offers a free share of {share}, outside [0, 1]")
    return numerator * (unit // denominator)


class Plan:
    """One kind of slot request compiled for one :meth:`CapacityIndex.place` call: the order
    its subtasks are fitted in (largest share first), what each takes in units and bytes, the
    maxima a tree node must hold to be worth a look (``checks``, None when no TaskExecutor has
    a resource asked for), for ``pack`` the rank from which to look (``resume``), and the
    devices with an idle warm process (``warm``: first among equals)."""

    __slots__ = ("order", "asks", "checks", "monotone", "resume", "unit", "spread", "warm")

    def __init__(self, request: SlotRequest, unit: int, spread: bool, tree: Tree[Free],
                 warm: frozenset[DeviceKey] = frozenset()) -> None:
        subtasks = request.subtasks
        self.order = sorted(range(len(subtasks)), key=lambda i: largest_share(subtasks[i]), reverse=True)
        self.asks: list[list[_Ask]] = []
        fractions: dict[str, int] = {}
        wholes: dict[str, int] = {}
        memories: dict[str, int] = {}
        asked: list[str] = []
        for i in self.order:
            asks = []
            memory = subtasks[i].profile.memory
            for resource, amount in subtasks[i].profile.items():
                asked.append(resource)
                wanted = memory.get(resource, 0)
                if amount >= 1:  # whole devices: how many must be wholly free, how many taken
                    need = math.ceil(amount)
                    asks.append((resource, 0, need, int(amount), ONE, wanted))
                    wholes[resource] = max(wholes.get(resource, 0), need)
                    continue
                share_units = amount.numerator * (unit // amount.denominator)
                asks.append((resource, share_units, 0, 0, amount, wanted))
                if share_units:
                    fractions[resource] = max(fractions.get(resource, 0), share_units)
                if wanted:
                    memories[resource] = max(memories.get(resource, 0), wanted)
            self.asks.append(asks)
        self.checks = tree.checks(fractions, wholes, memories)
        #: each resource asked by one subtask at most: the tree's maxima then decide exactly,
        #: and a TaskExecutor that refused this kind refuses it for the rest of the call
        self.monotone = len(asked) == len(set(asked))
        self.resume = 0
        self.unit, self.spread, self.warm = unit, spread, warm

    def preferred(self, request: SlotRequest, free: Free, preferences: Preferences) -> Prefer:
        """Per fitted subtask of ``request``, per resource, the devices of ``free`` it
        prefers (their indexes, best first)."""
        out: Prefer = []
        for i in self.order:
            mine: dict[str, list[int]] = {}
            for key in preferences.get(request.subtasks[i].holder, ()):
                found = free.where.get(key)
                if found is not None and found[1] not in mine.setdefault(found[0], []):
                    mine[found[0]].append(found[1])
            out.append(mine)
        return out

    def fit(self, free: Free, prefer: Prefer | None = None) -> Fit | None:
        """The reference's fit of one slot on one TaskExecutor, in units: the devices' new
        free units and bytes, the units taken and what each subtask takes; None when it does
        not fit. ``prefer`` (:meth:`preferred`): those devices first, and None unless a
        subtask gets one of them."""
        if free.slots < 1:
            return None
        trial: dict[str, list[int]] = {}
        trial_mem: dict[str, list[int]] = {}
        used = 0
        taken: Taken = []
        honoured = prefer is None
        for n, asks in enumerate(self.asks):
            mine: list[tuple[DeviceKey, Fraction, int]] = []
            ours = prefer[n] if prefer is not None else None
            for resource, share_units, need, take, share, wanted in asks:
                frees = trial.get(resource)
                if frees is None:
                    base = free.free.get(resource)
                    if not base:
                        return None
                    frees = trial[resource] = base.copy()
                mems = None
                if resource in free.known:
                    mems = trial_mem.get(resource)
                    if mems is None:
                        mems = trial_mem[resource] = free.mem[resource].copy()
                elif wanted:
                    return None  # memory asked, and no device here knows its size
                first = ours.get(resource) if ours else None
                if need:
                    picked = self._wholes(free, resource, frees, mems, need, wanted)
                    if picked is None:
                        return None
                    if first:
                        picked = [*(d for d in first if d in picked), *(d for d in picked if d not in first)]
                        honoured = honoured or picked[0] in first
                    for d in picked[:take]:
                        frees[d] = 0
                        used += self.unit
                        gone = 0
                        if mems is not None and mems[d] >= 0:
                            gone, mems[d] = mems[d], 0
                        mine.append((free.keys[resource][d], share, gone))
                    continue
                d = -1
                if first:
                    for d in first:  # the first preferred device that fits
                        if (gone := self._fits(free, resource, frees, mems, d, share_units, wanted)) >= 0:
                            honoured = True
                            break
                    else:
                        d = -1
                if d < 0:
                    d, gone = self._share(free, resource, frees, mems, share_units, wanted)
                if d < 0:
                    return None
                frees[d] -= share_units
                used += share_units
                if gone and mems is not None:
                    mems[d] -= gone
                mine.append((free.keys[resource][d], share, gone))
            taken.append(mine)
        return (trial, trial_mem, used, taken) if honoured else None

    def _wholes(self, free: Free, resource: str, frees: list[int], mems: list[int] | None,
                need: int, wanted: int) -> list[int] | None:
        """The wholly free devices (large enough) in the order the reference takes them."""
        unit = self.unit
        if mems is None:
            whole = [d for d, f in enumerate(frees) if f == unit]
        else:
            totals = free.mem_total[resource]
            whole = [d for d, f in enumerate(frees)
                     if f == unit and (mems[d] < 0 or mems[d] == totals[d])
                     and (not wanted or (mems[d] >= 0 and totals[d] >= wanted))]
            if wanted:  # the smallest large enough first (pack), the largest (spread)
                whole.sort(key=lambda d: -totals[d] if self.spread else totals[d])
        if self.warm:  # stable: warm devices first among equals
            keys, warm, spread = free.keys[resource], self.warm, self.spread
            sizes = free.mem_total[resource]
            whole.sort(key=lambda d: ((-sizes[d] if spread else sizes[d]) if wanted else 0, keys[d] not in warm))
        return whole if len(whole) >= need else None

    def _share(self, free: Free, resource: str, frees: list[int], mems: list[int] | None,
               share_units: int, wanted: int) -> tuple[int, int]:
        """The device a share (or memory only) goes to and the bytes it takes; ``-1``: none."""
        spread = self.spread
        pick = -1
        if self.warm:
            return self._share_warm(free, resource, frees, mems, share_units, wanted)
        if mems is None:  # no memory known here: the share alone decides
            for d, f in enumerate(frees):
                if f >= share_units and (pick < 0 or (f > frees[pick] if spread else f < frees[pick])):
                    pick = d
            return pick, 0
        totals, unit = free.mem_total[resource], self.unit
        best: tuple[int, int] | None = None
        gone = 0
        for d, f in enumerate(frees):
            if f < share_units:
                continue
            m = mems[d]
            want = 0
            if m < 0:
                if wanted:
                    continue
            else:
                want = wanted or share_units * totals[d] // unit
                if m < want:
                    continue
            key = (f, m) if share_units else (m, f)
            if spread:
                key = (-key[0], -key[1])
            if best is None or key < best:
                best, pick, gone = key, d, want
        return pick, gone

    def _fits(self, free: Free, resource: str, frees: list[int], mems: list[int] | None, d: int,
              share_units: int, wanted: int) -> int:
        """The bytes a share (or memory only) takes of device ``d``; ``-1``: it does not fit."""
        if frees[d] < share_units:
            return -1
        m = -1 if mems is None else mems[d]
        if m < 0:
            return -1 if wanted else 0
        want = wanted or share_units * free.mem_total[resource][d] // self.unit
        return want if m >= want else -1

    def _share_warm(self, free: Free, resource: str, frees: list[int], mems: list[int] | None,
                    share_units: int, wanted: int) -> tuple[int, int]:
        """:meth:`_share` with warm devices first among equals (a slower path: only when some
        device is warm)."""
        sign = -1 if self.spread else 1
        keys, warm = free.keys[resource], self.warm
        best: tuple[int, int, bool] | None = None
        pick, gone = -1, 0
        for d, f in enumerate(frees):
            taken = self._fits(free, resource, frees, mems, d, share_units, wanted)
            if taken < 0:
                continue
            m = -1 if mems is None else mems[d]
            key = (sign * f, sign * m, keys[d] not in warm) if share_units else (sign * m, sign * f, keys[d] not in warm)
            if best is None or key < best:
                best, pick, gone = key, d, taken
        return pick, gone
