"""Optional type information, as PyFlink's ``Types``: accelflow records are Python objects, so
these are inert markers that a ported job may keep passing (``output_type=Types.INT()``,
``ValueStateDescriptor("count", Types.LONG())``). ``None`` or any other value is accepted where
PyFlink takes a type.

Example:
    >>> Types.TUPLE([Types.STRING(), Types.INT()])
    Types.TUPLE([Types.STRING(), Types.INT()])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TypeInformation:
    """A named marker, equal to another with the same name and arguments."""

    __slots__ = ("name", "args")

    def __init__(self, name: str, *args: Any) -> None:
        self.name = name
        self.args = args

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeInformation) and (other.name, other.args) == (self.name, self.args)

    def __hash__(self) -> int:
        return hash((self.name, repr(self.args)))

    def __repr__(self) -> str:
        return f"Types.{self.name}({', '.join(repr(a) for a in self.args)})"


def _marker(name: str) -> Any:
    return staticmethod(lambda: TypeInformation(name))


class Types:
    """PyFlink's ``Types`` namespace (``Types.INT()``, ``Types.TUPLE([...])``...)."""

    STRING = _marker("STRING")
    BYTE = _marker("BYTE")
    BOOLEAN = _marker("BOOLEAN")
    SHORT = _marker("SHORT")
    INT = _marker("INT")
    LONG = _marker("LONG")
    FLOAT = _marker("FLOAT")
    DOUBLE = _marker("DOUBLE")
    CHAR = _marker("CHAR")
    BIG_INT = _marker("BIG_INT")
    BIG_DEC = _marker("BIG_DEC")
    INSTANT = _marker("INSTANT")
    SQL_DATE = _marker("SQL_DATE")
    SQL_TIME = _marker("SQL_TIME")
    SQL_TIMESTAMP = _marker("SQL_TIMESTAMP")
    PICKLED_BYTE_ARRAY = _marker("PICKLED_BYTE_ARRAY")

    @staticmethod
    def TUPLE(field_types: Sequence[Any]) -> TypeInformation:  # noqa: N802 (PyFlink's name)
        return TypeInformation("TUPLE", list(field_types))

    @staticmethod
    def ROW(field_types: Sequence[Any]) -> TypeInformation:  # noqa: N802
        return TypeInformation("ROW", list(field_types))

    @staticmethod
    def ROW_NAMED(field_names: Sequence[str], field_types: Sequence[Any]) -> TypeInformation:  # noqa: N802
        return TypeInformation("ROW_NAMED", list(field_names), list(field_types))

    @staticmethod
    def LIST(element_type: Any) -> TypeInformation:  # noqa: N802
        return TypeInformation("LIST", element_type)

    @staticmethod
    def MAP(key_type: Any, value_type: Any) -> TypeInformation:  # noqa: N802
        return TypeInformation("MAP", key_type, value_type)

    @staticmethod
    def BASIC_ARRAY(element_type: Any) -> TypeInformation:  # noqa: N802
        return TypeInformation("BASIC_ARRAY", element_type)

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: Any) -> TypeInformation:  # noqa: N802
        return TypeInformation("PRIMITIVE_ARRAY", element_type)


__all__ = ["TypeInformation", "Types"]
