"""Device memory in placement: request quantities, what a share takes, and readable sizes.

A device's memory is known when its info carries :data:`MEMORY_PROPERTY` (the GPU driver's
``memory_total``, in MiB); other devices' memory is unknown, and a request for memory never
goes to them. Amounts are whole bytes, so sums and comparisons are exact.

What one subtask takes of one device's memory (:func:`memory_taken`):

* a memory request (``{"memory": "10Gi"}``, alone or with a share) takes that much;
* a share without one (``0.5``) takes the same share of the memory, rounded down (0.5 of 80 GiB:
  40 GiB), the limit ``torch.cuda.set_per_process_memory_fraction(0.5)`` sets;
* a whole device takes all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from accelflow._errors import ConfigError

MEMORY_PROPERTY = "memory_total"
"""The info property that gives a device's memory, in MiB (as the GPU driver reports it)."""
MIB = 1 << 20
_UNITS = (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10))
ACCEPTED = "'10Gi', '512Mi', '1.5Gi', '10G' or a number of bytes"


def parse_memory(value: object, *, what: str) -> int:
    """A memory request in bytes, written as a Kubernetes quantity.

    Example:
        >>> parse_memory("1.5Gi", what="gpu"), parse_memory(4096, what="gpu")
        (1610612736, 4096)

    Raises:
        ConfigError: not a quantity of a positive whole number of bytes, naming ``what`` and the
            accepted forms.
    """
    from accelflow.config import memory_bytes  # only a client parses requests; keep subtasks lean

    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return memory_bytes(value)
    except ValueError as exc:
        problem = str(exc).split("; write e.g.")[0]
        raise ConfigError(f"{problem}; write device memory as {ACCEPTED}", key=what) from None


def device_memory(props: Mapping[str, str]) -> int | None:
    """A device's memory in bytes from its info properties, or ``None`` when unknown.

    Example:
        >>> device_memory({"index": "0", "memory_total": "81920"}) == 80 * 2**30
        True
        >>> device_memory({"index": "0"}) is None
        True
    """
    raw = props.get(MEMORY_PROPERTY, "").strip()
    return int(raw) * MIB if raw.isdigit() and int(raw) > 0 else None


def memory_taken(amount: Fraction, asked: int, total: int | None) -> int | None:
    """The bytes a subtask asking ``amount`` of a device (``0``: memory only) and ``asked``
    bytes (``0``: none asked) takes of a device with ``total`` bytes; ``None`` when the device's
    memory is unknown (a memory request then cannot go there; a share takes no tracked memory).

    Example:
        >>> memory_taken(Fraction(1, 2), 0, 80 * 2**30) == 40 * 2**30
        True
        >>> memory_taken(Fraction(0), 10 * 2**30, 24 * 2**30) == 10 * 2**30
        True
    """
    if total is None:
        return None
    if amount >= 1:
        return total
    if asked:
        return asked
    return amount.numerator * total // amount.denominator


def format_bytes(size: int) -> str:
    """A readable size: ``10 GiB``, ``1.5 GiB``, ``512 MiB``, ``100 B``.

    Example:
        >>> format_bytes(6 * 2**30), format_bytes(1536 * 2**20), format_bytes(100)
        ('6 GiB', '1.5 GiB', '100 B')
    """
    for name, factor in _UNITS:
        if size >= factor:
            text = f"{size / factor:.2f}".rstrip("0").rstrip(".")
            return f"{text} {name}"
    return f"{size} B"
