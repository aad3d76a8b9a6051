"""Value parsers for config keys. Each takes the raw value and returns the typed value or
raises ``ValueError`` whose message states the rule (the caller adds the key)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

_INT = re.compile(r"[+-]?\d+", re.ASCII)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?", re.ASCII)
# Fraction("1e999999999") would compute 10**999999999; no amount needs an exponent that big.
_HUGE_EXPONENT = re.compile(r"[eE][+-]?0*\d{4,}")
_DURATION_UNITS = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 0.001, "min": 60.0, "m": 60.0, "h": 3600.0}


def _describe(value: object) -> str:
    return repr(value) if isinstance(value, str) else f"{value!r} ({type(value).__name__})"


def positive_int(value: object) -> int:
    """A whole number >= 1: ``2`` or ``"2"``; not ``1.5``, ``0``, ``-1``, ``true``."""
    try:
        number = _int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"expected a positive integer, got {_describe(value)}")
    return number


def non_negative_int(value: object) -> int:
    """A whole number >= 0: ``0``, ``2`` or ``"2"``."""
    number = _int(value)
    if number < 0:
        raise ValueError(f"expected an integer >= 0, got {_describe(value)}")
    return number


def int_in_range(low: int, high: int, why: str = "") -> Callable[[object], int]:
    """A parser of whole numbers ``low..high``; ``why`` says what the upper bound protects."""

    def parse(value: object) -> int:
        try:
            number: int | None = _int(value)
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            reason = f" ({why})" if why and number is not None and number > high else ""
            raise ValueError(f"expected {rule}{reason}, got {_describe(value)}")
        return number

    rule = f"a positive integer up to {high}" if low == 1 else f"an integer from {low} to {high}"
    parse.__doc__ = f"{rule[0].upper()}{rule[1:]}."
    return parse


def port(value: object) -> int:
    """A TCP port ``0..65535`` (``0`` picks a free one)."""
    number = _int(value)
    if not 0 <= number <= 65535:
        raise ValueError(f"expected a port number 0..65535, got {_describe(value)}")
    return number


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {_describe(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT.fullmatch(value.strip()) and len(value.strip()) < 100:
        return int(value.strip())
    raise ValueError(f"expected an integer, got {_describe(value)}")


def positive_number(value: object) -> Fraction:
    """An exact positive amount: ``2``, ``"0.25"``, ``"1/3"``; parsed without floats."""
    if isinstance(value, bool):
        raise ValueError(f"expected a positive number, got {_describe(value)}")
    text = str(value).strip()
    if _HUGE_EXPONENT.search(text):
        raise ValueError(f"expected a positive number of sensible size, got {_describe(value)}")
    try:
        number = Fraction(text) if not isinstance(value, Fraction) else value
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"expected a positive number, got {_describe(value)}") from None
    if number <= 0:
        raise ValueError(f"expected a positive number, got {_describe(value)}")
    return number


def positive_number_up_to(high: int) -> Callable[[object], Fraction]:
    """A parser of exact positive amounts no larger than ``high``."""

    def parse(value: object) -> Fraction:
        number = positive_number(value)
        if number > high:
            raise ValueError(f"expected a positive number up to {high}, got {_describe(value)}")
        return number

    parse.__doc__ = f"An exact positive number up to {high}, e.g. `2`, `0.25` or `1/3`."
    return parse


MAX_SECONDS = 365 * 24 * 3600
"""The longest duration any key accepts (one year): longer waits overflow timers."""


def seconds(value: object) -> float:
    """A duration up to one year: ``10`` (seconds), ``"2.5 s"``, ``"500 ms"``, ``"1 min"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '10 s' or '500 ms', got {_describe(value)}")
    if isinstance(value, int | float):
        try:
            result = float(value)
        except OverflowError:
            raise ValueError(f"expected a duration of sensible size, got {_describe(value)}") from None
    else:
        match = _DURATION.fullmatch(str(value).strip().lower())
        if not match:
            raise ValueError(f"expected a duration such as '10 s' or '500 ms', got {_describe(value)}")
        result = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not math.isfinite(result) or result <= 0:
        raise ValueError(f"expected a positive, finite duration, got {_describe(value)}")
    if result > MAX_SECONDS:
        raise ValueError(f"expected a duration of at most one year ({MAX_SECONDS} s), got {_describe(value)}")
    return result


def non_negative_seconds(value: object) -> float:
    """A duration that may be zero: ``0``, ``"500 ms"``, ``"1 s"``."""
    if value in (0, "0") or (isinstance(value, str) and value.strip() in ("0", "0 s", "0s", "0 ms", "0ms")):
        return 0.0
    return seconds(value)


def buffer_timeout(value: object) -> float:
    """``execution.buffer-timeout``: a duration with its unit (``"100 ms"``), ``0`` (flush
    every record) or ``-1`` (only full buffers), in seconds (-1.0 for -1)."""
    if value in (-1, "-1") or (isinstance(value, str) and value.strip().replace(" ", "") in ("-1ms", "-1s")):
        return -1.0
    if isinstance(value, int | float) and not isinstance(value, bool) and value != 0:
        raise ValueError(f"expected a duration with its unit such as '100 ms', or 0 (flush every record) or -1 "
                         f"(only full buffers), got {_describe(value)}")
    return non_negative_seconds(value)


_QUANTITY = re.compile(
    r"(?P<number>\d{1,30}(?:\.\d{0,30})?|\.\d{1,30})(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?",
    re.ASCII,
)
_QUANTITY_FACTORS: dict[str | None, Decimal] = {
    **{s: Decimal(1024) ** p for p, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    **{s: Decimal(1000) ** p for p, s in enumerate(("k", "M", "G", "T", "P", "E"), 1)},
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), None: Decimal(1),
}
MAX_MEMORY_BYTES = 1024**5
"""The largest memory size of one TaskExecutor (1Pi)."""


def memory_size(value: object) -> str:
    """A Kubernetes quantity of bytes, e.g. `2Gi`, `512Mi` or `2G`, positive and at most `1Pi`."""
    memory_bytes(value)
    return str(value).strip()


def memory_bytes(value: object) -> int:
    """The bytes of a :func:`memory_size`, without the ``kubernetes`` client.

    Example:
        >>> memory_bytes("2Gi"), memory_bytes("1.5k"), memory_bytes("1e3")
        (2147483648, 1500, 1000)

    Raises:
        ValueError: ``value`` is not a Kubernetes quantity of a positive whole number of bytes
            up to ``1Pi`` (the message says which rule it breaks).
    """
    text = "" if value is None or isinstance(value, bool) else str(value).strip()
    sign = text[:1] if text[:1] in ("+", "-") else ""
    match = _QUANTITY.fullmatch(text[len(sign):])
    if not match:
        raise ValueError(
            f"{_describe(value)} is not a Kubernetes quantity; write e.g. '2Gi', '2048Mi' or '2G' "
            "(binary suffixes Ki, Mi, Gi, Ti; decimal k, M, G, T)"
        )
    suffix = match.group("suffix")
    if suffix and suffix[0] in "eE" and suffix not in _QUANTITY_FACTORS:
        size = Decimal(match.group("number")).scaleb(int(suffix[1:]))
    else:
        size = Decimal(match.group("number")) * _QUANTITY_FACTORS[suffix]
    if sign == "-" or size <= 0:
        raise ValueError(f"{_describe(value)} must be positive, e.g. '2Gi'")
    if size > MAX_MEMORY_BYTES:
        raise ValueError(f"{_describe(value)} is more than the 1Pi one TaskExecutor may ask for")
    if size != size.to_integral_value():
        hint = " (the suffix 'm' means milli); did you mean 'Mi', e.g. '512Mi'?" if suffix == "m" else ""
        raise ValueError(f"{_describe(value)} is {size} bytes, not a whole number of bytes{hint}")
    return int(size)


def resource_amounts(value: object) -> Mapping[str, float]:
    """A JSON object of Ray resource names and amounts >= 0, e.g. `{"fpga": 2}`."""
    amounts = json_object(value)
    result: dict[str, float] = {}
    for name, amount in amounts.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"resource names must be non-empty text, got {_describe(name)}")
        if name in ("CPU", "GPU"):
            raise ValueError(f"{name!r} is set with ray.local.num-{name.lower()}s, not here")
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValueError(f"{name!r}: expected a number >= 0, got {_describe(amount)}")
        try:
            number = float(amount)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{name!r}: expected a finite number >= 0, got {_describe(amount)}")
        result[name] = number
    return result


def boolean(value: object) -> bool:
    """``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {_describe(value)}")


def string(value: object) -> str:
    """A non-empty text (trimmed)."""
    if value is None:
        raise ValueError("has no value (an empty YAML value is null); give one or remove the key")
    if isinstance(value, dict | list | tuple | set):
        raise ValueError(f"expected a string, got {_describe(value)}")
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


def choice(*options: str) -> Callable[[object], str]:
    def parse(value: object) -> str:
        text = "" if value is None else str(value).strip().lower()
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}; got {_describe(value)}")
        return text

    parse.__doc__ = f"one of {', '.join(options)}"
    return parse


def upper_choice(*options: str) -> Callable[[object], str]:
    """Like :func:`choice` for upper-case names such as Flink's enum values; any case is
    accepted and the value is returned in upper case."""

    def parse(value: object) -> str:
        text = "" if value is None or isinstance(value, bool) else str(value).strip().upper()
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}; got {_describe(value)}")
        return text

    parse.__doc__ = f"one of {', '.join(options)}"
    return parse


def json_object(value: object) -> Mapping[str, Any]:
    """A JSON object given as text (``'{"a": 1}'``) or, in YAML, as a mapping."""
    if isinstance(value, Mapping):
        return dict(value)
    parsed = _json(value, "a JSON object")
    if not isinstance(parsed, dict):
        raise ValueError(f"expected a JSON object, got {_describe(value)}")
    return parsed


def string_map(value: object) -> Mapping[str, str]:
    """``"k1=v1,k2=v2"``, a JSON object, or a YAML mapping of strings."""
    if isinstance(value, Mapping):
        items = {str(k): str(v) for k, v in value.items()}
    else:
        text = str(value).strip()
        if text.startswith("{"):
            return {str(k): str(v) for k, v in json_object(text).items()}
        items = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"expected key=value pairs separated by commas, got {part!r}")
            items[key.strip()] = val.strip()
    return items


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def module_names(value: object) -> tuple[str, ...]:
    """Python module names: ``"torchvision, my_models.cnn"`` or, in YAML, a list of them."""
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    bad = [name for name in names if not _MODULE.fullmatch(name)]
    if bad:
        raise ValueError(f"expected module names such as 'torchvision' or 'my_models.cnn', separated by "
                         f"commas, got {', '.join(map(repr, bad))}")
    return names


def json_list(value: object) -> list[Any]:
    """A JSON list given as text or, in YAML, as a sequence."""
    if isinstance(value, list | tuple):
        return list(value)
    parsed = _json(value, "a JSON list")
    if not isinstance(parsed, list):
        raise ValueError(f"expected a JSON list, got {_describe(value)}")
    return parsed


def _json(value: object, what: str) -> Any:
    try:
        return json.loads(str(value))
    except json.JSONDecodeError as exc:
        raise ValueError(f"expected {what}, got {_describe(value)} ({exc.msg})") from None
    except RecursionError:
        raise ValueError(f"expected {what}, got one nested too deeply") from None
