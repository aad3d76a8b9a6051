"""Exact resource amounts: requests parsed into ``Fraction`` (never floats).

A request amount is either a whole number of devices (``1``, ``2``) or a share of one device
(``0.25``, ``"1/3"``); shares above one device (``1.5``) are refused because a fractional
request must fit on a single device.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Union

from accelflow._errors import ConfigError

Amount = Union[int, float, str, Fraction]

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

    Example:
        >>> ResourceProfile.parse({"gpu": 0.25}, operator="classify")
        ResourceProfile(gpu=0.25)

    Raises (from :meth:`parse`):
        ConfigError: a bad amount or resource name, naming the operator.
    """

    __slots__ = ("_amounts",)

    def __init__(self, amounts: Mapping[str, Fraction] | None = None) -> None:
        self._amounts = dict(sorted((amounts or {}).items()))

    @classmethod
    def parse(cls, requests: Mapping[str, Amount] | None, *, operator: str) -> ResourceProfile:
        if requests is None:
            return cls()
        if not isinstance(requests, Mapping):
            raise ConfigError(
                f"resources= must be a mapping such as {{'gpu': 1}}, got {requests!r}",
                key=f"operator {operator!r}",
            )
        amounts = {}
        for name, value in requests.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"resource names must be strings, got {name!r}", key=f"operator {operator!r}")
            amounts[name] = parse_amount(value, what=f"operator {operator!r} resources[{name!r}]")
        return cls(amounts)

    def __getitem__(self, key: str) -> Fraction:
        return self._amounts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __hash__(self) -> int:
        return hash(tuple(self._amounts.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceProfile):
            return self._amounts == other._amounts
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={format_amount(v)}" for k, v in self._amounts.items())
        return f"ResourceProfile({inner})"
