"""Exact resource amounts: requests parsed into ``Fraction`` (never floats).

A request amount is either a whole number of devices (``1``, ``2``) or a share of one device
(``0.25``, ``"1/3"``); shares above one device (``1.5``) are refused because a fractional
request must fit on a single device. A request may also ask for device memory, as a
Kubernetes quantity (:class:`ResourceProfile`, :mod:`._memory`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Union

from accelflow._errors import ConfigError
from accelflow.scheduling._memory import format_bytes, parse_memory

Amount = Union[int, float, str, Fraction]
#: one resource's request in ``resources=``: an amount, or ``{"amount": ..., "memory": ...}``
ResourceRequest = Union[Amount, Mapping[str, object]]

ONE = Fraction(1)


def parse_amount(value: Amount, *, what: str) -> Fraction:
    """Parse one request amount exactly.

    Floats are read through their shortest decimal form, so ``0.1`` means one tenth exactly.

    Example:
        >>> parse_amount(0.25, what="gpu")
        Fraction(1, 4)

    Raises:
        ConfigError: not a number, not positive, or a fraction above one device (names ``what``).
    """
    if isinstance(value, bool):
        raise ConfigError(f"expected a number of devices, got {value!r}", key=what)
    try:
        if isinstance(value, Fraction):
            amount = value
        elif isinstance(value, float):
            amount = Fraction(repr(value))
        else:
            amount = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise ConfigError(
            f"expected a number of devices such as 1, 0.5 or '1/3', got {value!r}", key=what
        ) from None
    if amount <= 0:
        raise ConfigError(f"expected a positive amount, got {value!r}", key=what)
    if amount > 1 and amount.denominator != 1:
        raise ConfigError(
            f"{value!r} is more than one device but not a whole number; a share must fit on "
            "one device (use <= 1, or a whole number of devices)",
            key=what,
        )
    return amount


def format_amount(amount: Fraction) -> str:
    """``1`` → ``'1'``, ``1/4`` → ``'0.25'``, ``1/3`` → ``'1/3'`` (exact, readable)."""
    if amount.denominator == 1:
        return str(amount.numerator)
    denominator = amount.denominator
    while denominator % 2 == 0:
        denominator //= 2
    while denominator % 5 == 0:
        denominator //= 5
    if denominator == 1:
        return format(float(amount), "g")
    return f"{amount.numerator}/{amount.denominator}"


class ResourceProfile(Mapping[str, Fraction]):
    """What one operator subtask asks for, e.g. ``{"gpu": 1/4}``. Immutable and hashable.

    A resource may also ask for device memory (bytes, :attr:`memory`): ``{"gpu": {"memory":
    "10Gi"}}`` (memory only: the amount is ``0``) or ``{"gpu": {"amount": 0.5, "memory":
    "10Gi"}}``; with a whole device (``{"amount": 1, "memory": "40Gi"}``) the memory is the
    least each device must have.

    Example:
        >>> ResourceProfile.parse({"gpu": 0.25}, operator="classify")
        ResourceProfile(gpu=0.25)
        >>> ResourceProfile.parse({"gpu": {"memory": "10Gi"}}, operator="embed")
        ResourceProfile(gpu={memory: 10 GiB})

    Raises (from :meth:`parse`):
        ConfigError: a bad amount, memory or resource name, naming the operator.
    """

    __slots__ = ("_amounts", "_memory")

    def __init__(
        self, amounts: Mapping[str, Fraction] | None = None, memory: Mapping[str, int] | None = None
    ) -> None:
        self._amounts = dict(sorted((amounts or {}).items()))
        self._memory = {k: v for k, v in sorted((memory or {}).items()) if v}

    @classmethod
    def parse(cls, requests: Mapping[str, ResourceRequest] | None, *,
              operator: str) -> ResourceProfile:
        if requests is None:
            return cls()
        where = f"operator {operator!r}"
        if not isinstance(requests, Mapping):
            raise ConfigError(
                f"resources= must be a mapping such as {{'gpu': 1}}, got {requests!r}", key=where
            )
        amounts: dict[str, Fraction] = {}
        memory: dict[str, int] = {}
        for name, value in requests.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"resource names must be strings, got {name!r}", key=where)
            what = f"{where} resources[{name!r}]"
            if isinstance(value, Mapping):
                amounts[name], memory[name] = _parse_request(value, what)
            else:
                amounts[name] = parse_amount(value, what=what)
        return cls(amounts, memory)

    @property
    def memory(self) -> Mapping[str, int]:
        """The device memory asked for, in bytes, by resource (only those that ask)."""
        return dict(self._memory)

    def __getitem__(self, key: str) -> Fraction:
        return self._amounts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __hash__(self) -> int:
        return hash((tuple(self._amounts.items()), tuple(self._memory.items())))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceProfile):
            return self._amounts == other._amounts and self._memory == other._memory
        return NotImplemented

    def describe(self, resource: str) -> str:
        """What is asked of ``resource`` in words: ``0.5``, ``10 GiB of memory``, ``0.5 and
        10 GiB of memory``."""
        amount, memory = self._amounts[resource], self._memory.get(resource)
        if memory is None:
            return format_amount(amount)
        mem = f"{format_bytes(memory)} of memory"
        return mem if not amount else f"{format_amount(amount)} and {mem}"

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={self._repr(k)}" for k in self._amounts)
        return f"ResourceProfile({inner})"

    def _repr(self, resource: str) -> str:
        amount, memory = self._amounts[resource], self._memory.get(resource)
        if memory is None:
            return format_amount(amount)
        mem = f"memory: {format_bytes(memory)}"
        return f"{{amount: {format_amount(amount)}, {mem}}}" if amount else f"{{{mem}}}"


_REQUEST_KEYS = ("amount", "memory")


def _parse_request(value: Mapping[str, object], what: str) -> tuple[Fraction, int]:
    """``{"amount": ..., "memory": ...}``: the amount (``0`` when only memory is asked) and
    the memory in bytes."""
    unknown = [k for k in value if k not in _REQUEST_KEYS]
    if unknown or "memory" not in value:
        problem = f"unknown key(s) {', '.join(map(repr, unknown))}" if unknown else "no 'memory'"
        raise ConfigError(
            f"{problem}; a mapping asks for device memory, alone or with an amount: "
            "{'memory': '10Gi'} or {'amount': 0.5, 'memory': '10Gi'} (or give the amount "
            "alone, e.g. 0.5)",
            key=what,
        )
    memory = parse_memory(value["memory"], what=f"{what}['memory']")
    if "amount" not in value:
        return Fraction(0), memory
    return parse_amount(value["amount"], what=f"{what}['amount']"), memory  # type: ignore[arg-type]
