"""What fits on one device and what it takes: the device-level rules of the reference placement
(:mod:`._reference`) and of the exhaustive search (:mod:`._packing`), written once, on offers.

An :class:`Ask` is one subtask's request of one resource: an amount (whole devices, a share of
one, or ``0`` for memory only) and the memory it asks for (``0``: none). A device fits an ask
when it is not quarantined and:

* whole devices (amount >= 1): it is wholly free (all its share and, where known, all its
  memory) and, when memory is asked, its memory is known and at least that large;
* a share or memory only: its free share is at least the amount, and its free memory (where
  known) at least what the ask takes of it (:func:`~._memory.memory_taken`); memory asked of a
  device whose memory is unknown never fits.

The incremental placement (:mod:`._index`) applies the same rules on integer units.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accelflow.scheduling._amounts import ONE, ResourceProfile, format_amount
from accelflow.scheduling._memory import format_bytes, memory_taken
from accelflow.scheduling._ledger import DeviceKey
from accelflow.scheduling._model import Policy, TaskExecutorOffer, Warm, natural, natural_key


@dataclass(frozen=True, slots=True)
class Ask:
    """One subtask's request of one resource (``whole``: ``amount >= 1``, kept as a flag:
    comparing Fractions is slow)."""

    resource: str
    amount: Fraction
    memory: int = 0
    whole: bool = False


@dataclass(frozen=True, slots=True)
class Device:
    """One device of an offer as the rules read it."""

    address: str
    free: Fraction
    memory: tuple[int, int] | None  # (free, total) bytes
    quarantine: str | None
    warm: bool = False  # an idle warm subtask process waits on it: first among equals

    def taken(self, ask: Ask) -> tuple[Fraction, int | None]:
        """The share and the bytes (``None``: memory unknown) ``ask`` takes of this device
        (:func:`~._memory.memory_taken`)."""
        if ask.whole:
            return ONE, None if self.memory is None else self.memory[1]
        if self.memory is None:
            return ask.amount, None
        return ask.amount, memory_taken(ask.amount, ask.memory, self.memory[1])

    def fits(self, ask: Ask) -> bool:
        if self.quarantine is not None:
            return False
        if ask.whole:
            wholly = self.free == ONE and (self.memory is None or self.memory[0] == self.memory[1])
            return wholly and (not ask.memory or (self.memory is not None and self.memory[1] >= ask.memory))
        if ask.amount and self.free < ask.amount:
            return False
        if self.memory is None:
            return not ask.memory
        needed = self.taken(ask)[1]
        return needed is not None and self.memory[0] >= needed

    def key(self, ask: Ask, policy: Policy) -> tuple[object, ...]:
        """Which fitting device is taken: the least key. Whole devices: natural order, or the
        smallest memory that is large enough (``pack``; ``spread``: the largest); a share: the
        tightest share, then memory (``pack``; ``spread``: the freest); memory only: the
        tightest memory, then share (``spread``: the freest). Among equals, a warm device
        first, then natural address order."""
        sign = 1 if policy == "pack" else -1
        mem = -1 if self.memory is None else self.memory[0]
        last = (not self.warm, natural_key(self.address))
        if ask.whole:
            size = 0 if not ask.memory or self.memory is None else sign * self.memory[1]
            return size, *last
        if ask.amount:
            return sign * self.free, sign * mem, *last
        return sign * mem, sign * self.free, *last


def asks(profile: ResourceProfile) -> list[Ask]:
    """``profile``'s requests, resource by resource."""
    memory = profile.memory
    return [Ask(r, a, memory.get(r, 0), a >= 1) for r, a in profile.items()]


def devices(offer: TaskExecutorOffer, resource: str, warm: Warm = ()) -> list[Device]:
    """``offer``'s devices of ``resource`` in natural address order (``warm``: the devices
    with an idle warm subtask process)."""
    memory = offer.memory.get(resource, {})
    quarantined = offer.quarantined.get(resource, {})
    shares = offer.devices.get(resource, {})
    return [Device(a, shares[a], memory.get(a), quarantined.get(a), bool(warm) and DeviceKey(offer.id, resource, a) in warm)
            for a in natural(tuple(shares))]


def take(offer: TaskExecutorOffer, resource: str, device: Device, ask: Ask) -> tuple[Fraction, int | None]:
    """Take what ``ask`` takes of ``device`` out of ``offer``; returns it."""
    share, taken = device.taken(ask)
    offer.devices[resource][device.address] -= share
    if taken is not None:
        free, total = offer.memory[resource][device.address]
        offer.memory[resource][device.address] = (free - taken, total)
    return share, taken


def give_back(offer: TaskExecutorOffer, resource: str, address: str, share: Fraction, taken: int | None) -> None:
    """Undo :func:`take`."""
    offer.devices[resource][address] += share
    if taken is not None:
        free, total = offer.memory[resource][address]
        offer.memory[resource][address] = (free + taken, total)


def spread_share(offer: TaskExecutorOffer) -> Fraction:
    """The free share of ``offer``'s devices that are not quarantined (``spread``'s order)."""
    total = Fraction(0)
    for resource, shares in offer.devices.items():
        out = offer.quarantined.get(resource, {})
        total += sum((s for a, s in shares.items() if a not in out), Fraction(0))
    return total


# -- why not -----------------------------------------------------------------------------------
def whole_refusal(ask: Ask, found: list[Device], fitting: int) -> tuple[list[str], str]:
    """The reason lines and summary when too few devices are wholly free (and large enough)."""
    r = ask.resource
    large = f" with at least {format_bytes(ask.memory)} of memory" if ask.memory else ""
    enough = " and large enough" if ask.memory else ""
    why = (f"{r} needs {ask.amount} whole device(s){large}, {fitting} of {len(found)} "
           f"are wholly free{enough}")
    frees = ", ".join(f"{r} {d.address} has {format_amount(d.free)} free{_memory_note(d, ask)}" for d in found)
    return [f"{why} ({frees})"], why


def _memory_note(device: Device, ask: Ask) -> str:
    notes = []
    if device.memory is not None and (ask.memory or device.memory[0] != device.memory[1]):
        notes.append(f"{format_bytes(device.memory[0])} of {format_bytes(device.memory[1])} memory free")
    elif device.memory is None and ask.memory:
        notes.append("memory unknown")
    if device.quarantine is not None:
        notes.append(f"quarantined: {device.quarantine}")
    return f" ({'; '.join(notes)})" if notes else ""


def share_refusal(ask: Ask, found: list[Device]) -> tuple[list[str], str]:
    """One reason line per device and a summary when no device holds a share or memory ask."""
    r, needed = ask.resource, format_amount(ask.amount)
    lines = [f"{r} {d.address} {_device_reason(d, ask)}" for d in found]
    usable = [d for d in found if d.quarantine is None]
    if not usable:
        return lines, f"every {r} is quarantined"
    known = [d.memory[0] for d in usable if d.memory is not None]
    if ask.memory:
        if not known:
            return lines, f"no {r} reports its memory size, {format_bytes(ask.memory)} needed"
        return lines, f"{r} has at most {format_bytes(max(known))} of memory free, {format_bytes(ask.memory)} needed"
    best = max(d.free for d in usable)
    if best >= ask.amount:  # the share is there; the memory that share takes is not
        return lines, f"{r} has no device with {needed} and that share of its memory free"
    return lines, f"{r} has at most {format_amount(best)} free, {needed} needed"


def _device_reason(device: Device, ask: Ask) -> str:
    if device.quarantine is not None:
        return f"is quarantined: {device.quarantine}"
    if device.free < ask.amount:
        return f"has {format_amount(device.free)} free, {format_amount(ask.amount)} needed"
    if device.memory is None:
        return f"has no known memory size, {format_bytes(ask.memory)} needed"
    needed = device.taken(ask)[1] or 0
    free, total = device.memory
    return f"has {format_bytes(free)} free of {format_bytes(total)}, {format_bytes(needed)} needed"
