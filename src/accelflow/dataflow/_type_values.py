"""What PyFlink's type information does to records, for jobs ported from PyFlink.

A PyFlink record with a declared type (``Types.TUPLE([...])``, ``Types.ROW_NAMED(...)``...)
lives on the Java side: ``from_collection`` converts the given values to that type (a tuple
given for a ``ROW_NAMED`` becomes a named :class:`Row`, for a ``ROW`` one named ``f0, f1...``,
a ``FLOAT`` field is rounded to 32 bits), and ``print()`` or a ``SimpleStringEncoder`` write
Java's ``toString`` of it: a tuple as ``(hi,1,5)``, a row as ``+I[1,Flink]``, a double as
``1.0E10``. A record without a declared
type (or ``Types.PICKLED_BYTE_ARRAY()``) stays a Python object written with ``str``.

Example:
    >>> ti = TypeInformation("TUPLE", [TypeInformation("STRING"), TypeInformation("FLOAT")])
    >>> typed_value(("a", 0.1), ti)
    ('a', 0.10000000149011612)
    >>> FlinkText(ti)(("a", 0.10000000149011612))
    '(a,0.1)'
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal
from typing import Any

from accelflow.dataflow._row import Row
from accelflow.dataflow._types import TypeInformation

_INTS = {"BYTE", "SHORT", "INT", "LONG", "BIG_INT"}
_FLOATS = {"FLOAT", "DOUBLE"}
_UNTYPED = {"PICKLED_BYTE_ARRAY"}


def is_typed(type_info: Any) -> bool:
    """Whether records of ``type_info`` are Java values in PyFlink (written with ``toString``)."""
    return isinstance(type_info, TypeInformation) and type_info.name not in _UNTYPED


def typed_value(value: Any, type_info: Any) -> Any:
    """``value`` as PyFlink hands it back after converting it to ``type_info`` (unchanged when
    the type is not a :class:`TypeInformation` or says nothing about it)."""
    if value is None or not is_typed(type_info):
        return value
    name, args = type_info.name, type_info.args
    if name == "FLOAT":
        return _float32(float(value))
    if name == "DOUBLE":
        return float(value)
    if name in _INTS:
        return int(value)
    if name == "TUPLE":
        return tuple(typed_value(v, t) for v, t in zip(value, args[0]))
    if name in ("ROW", "ROW_NAMED"):
        types = args[-1]
        values = [typed_value(v, t) for v, t in zip(value, types)]
        row = Row(*values)
        if name == "ROW_NAMED":
            row.set_field_names(args[0])
        elif isinstance(value, Row) and value._fields is not None:
            row.set_field_names(value._fields)
        else:  # PyFlink names the fields of a Types.ROW f0, f1...
            row.set_field_names([f"f{n}" for n in range(len(values))])
        return row
    if name in ("LIST", "BASIC_ARRAY", "PRIMITIVE_ARRAY"):
        return [typed_value(v, args[0]) for v in value]
    if name == "MAP":
        return {typed_value(k, args[0]): typed_value(v, args[1]) for k, v in value.items()}
    return value


class FlinkText:
    """Java's ``toString`` of records of ``type_info``: what PyFlink's ``print()`` and
    ``Encoder.simple_string_encoder()`` write for them."""

    def __init__(self, type_info: Any) -> None:
        self.type_info = type_info

    def __call__(self, record: Any) -> str:
        return java_text(record, self.type_info)

    def __repr__(self) -> str:
        return f"FlinkText({self.type_info!r})"


def java_text(value: Any, type_info: Any = None) -> str:
    """Java's ``toString`` of ``value``: the declared ``type_info`` decides what a composite
    is (a tuple declared ``Types.ROW`` prints as a row), its fields are formatted by their types."""
    name = type_info.name if isinstance(type_info, TypeInformation) else None
    args: tuple[Any, ...] = type_info.args if name else ()
    composite = isinstance(value, (Row, tuple, list))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_float(value, single=name == "FLOAT")
    if composite and (name in ("ROW", "ROW_NAMED") or (name is None and isinstance(value, Row))):
        kind = value.get_row_kind() if isinstance(value, Row) else "+I"
        return f"{kind}[{','.join(java_text(v, t) for v, t in zip(value, _field_types(args, value, -1)))}]"
    if composite and (name == "TUPLE" or (name is None and isinstance(value, tuple))):
        return f"({','.join(java_text(v, t) for v, t in zip(value, _field_types(args, value, 0)))})"
    if isinstance(value, list):
        element = args[0] if name in ("LIST", "BASIC_ARRAY", "PRIMITIVE_ARRAY") else None
        return f"[{', '.join(java_text(v, element) for v in value)}]"
    if isinstance(value, dict):
        k, v = (args[0], args[1]) if name == "MAP" else (None, None)
        return "{" + ", ".join(f"{java_text(a, k)}={java_text(b, v)}" for a, b in value.items()) + "}"
    return str(value)


def _field_types(args: tuple[Any, ...], value: Any, at: int) -> list[Any]:
    """The declared types of a composite's fields (``args[at]``), or none for each field."""
    return list(args[at]) if args else [None] * len(value)


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _java_float(value: float, *, single: bool) -> str:
    """Java's ``Double.toString`` (``Float.toString`` when ``single``): ``5.0``, ``0.001``,
    ``1.0E7``, ``1.0E-4``, ``NaN``, ``-Infinity``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    digits = _shortest32(value) if single else repr(value)
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = format(Decimal(digits), "f")
        return text if "." in text else text + ".0"
    sign, numerals, exponent = Decimal(digits).normalize().as_tuple()
    shown = "".join(map(str, numerals))
    power = len(shown) - 1 + int(exponent)
    return f"{'-' if sign else ''}{shown[0]}.{shown[1:] or '0'}E{power}"


def _shortest32(value: float) -> str:
    """The fewest digits that read back as the same 32-bit float."""
    target = _float32(value)
    for precision in range(1, 10):
        text = f"{target:.{precision}g}"
        if _float32(float(text)) == target:
            return text
    return repr(target)


__all__ = ["FlinkText", "is_typed", "java_text", "typed_value"]
