"""PyFlink's ``Row`` and ``RowKind`` (``pyflink.common``), with PyFlink's semantics: positional
or named fields, fields read by position, by name or as attributes, equality of kind and
values (named fields compared by name), and PyFlink's repr.

Example:
    >>> row = Row(name="Alice", age=11)
    >>> row
    Row(name='Alice', age=11)
    >>> row.name, row["age"], row[0], "name" in row
    ('Alice', 11, 'Alice', True)
    >>> Person = Row("name", "age")
    >>> Person("Bob", 12)
    Row(name='Bob', age=12)
    >>> Row(1, "a")
    <Row(1, 'a')>
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum
from typing import Any


class RowKind(Enum):
    """The change a row stands for; ``str`` gives Flink's short form (``+I``, ``-U``...)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def __str__(self) -> str:
        return ("+I", "-U", "+U", "-D")[self.value]


class Row:
    """A record of fields, PyFlink's ``Row``: ``Row(1, "a")`` (positional) or
    ``Row(id=1, name="a")`` (named, in the order given); ``Row("id", "name")`` makes a row
    "class" that is called with the values.

    Raises:
        ValueError: both positional and named fields, or more values than a row class has fields.
    """

    __slots__ = ("_fields", "_values", "_row_kind")
    _fields: list[str] | None
    _values: list[Any]
    _row_kind: RowKind

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Can not use both args and kwargs to create Row")
        fields: list[str] | None = list(kwargs) if kwargs else None
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_values", list(kwargs.values()) if kwargs else list(args))
        object.__setattr__(self, "_row_kind", RowKind.INSERT)

    # -- PyFlink's methods --------------------------------------------------------------------
    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The named fields as a dict (nested rows too with ``recursive=True``).

        Raises:
            TypeError: the row has no field names.
        """
        if self._fields is None:
            raise TypeError("Cannot convert a Row class into dict")
        if not recursive:
            return dict(zip(self._fields, self._values))
        return {name: _as_plain(value) for name, value in zip(self._fields, self._values)}

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        object.__setattr__(self, "_row_kind", row_kind)

    def set_field_names(self, field_names: Sequence[str]) -> None:
        object.__setattr__(self, "_fields", list(field_names))

    def get_fields_by_names(self, names: Sequence[str]) -> list[Any]:
        """The values of ``names``, in that order.

        Raises:
            KeyError: a name that is not a field (naming the missing ones).
        """
        if self._fields is None or list(names) == self._fields:
            return self._values
        missing = sorted(set(names) - set(self._fields))
        if missing:
            raise KeyError(f"Field names {missing} not exist in {self._fields}.")
        return [self._values[self._fields.index(name)] for name in names]

    @staticmethod
    def of_kind(row_kind: RowKind, *args: Any, **kwargs: Any) -> Row:
        row = Row(*args, **kwargs)
        row.set_row_kind(row_kind)
        return row

    # -- the Python protocol ------------------------------------------------------------------
    def __call__(self, *args: Any) -> Row:
        if len(args) > len(self):
            raise ValueError(f"Can not create Row with fields {self!r}, expected {len(self)} values but got {args}")
        return _create_row(self._values, args, self._row_kind)

    def __contains__(self, item: object) -> bool:
        return item in (self._fields if self._fields is not None else self._values)

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, (int, slice)):
            return self._values[item]
        return self._values[self._index(item, KeyError)]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, (int, slice)):
            self._values[key] = value
        else:
            self._values[self._index(key, KeyError)] = value

    def __getattr__(self, item: str) -> Any:
        if item.startswith("_"):
            raise AttributeError(item)
        return self._values[self._index(item, AttributeError)]

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Row fields are set by index or name (row[{key!r}] = ...), not as attributes")

    def _index(self, name: Any, error: type[Exception]) -> int:
        if self._fields is None or name not in self._fields:
            raise error(name)
        return self._fields.index(name)

    def __reduce__(self) -> tuple[Any, ...]:
        return _create_row, (self._fields, tuple(self._values), self._row_kind)

    def __repr__(self) -> str:
        if self._fields is not None:
            return "Row(%s)" % ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._values))
        return "<Row(%s)>" % ", ".join(repr(v) for v in self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row) or type(self) is not type(other) or self._row_kind != other._row_kind:
            return False
        if self._fields is None or other._fields is None:
            return self._fields is None and other._fields is None and self._values == other._values
        return self.as_dict() == other.as_dict() and sorted(self._fields) == sorted(other._fields)

    def __hash__(self) -> int:
        return hash(tuple(self._values))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _create_row(fields: Sequence[str] | None, values: Sequence[Any], row_kind: RowKind | None = None) -> Row:
    row = Row(*values)
    if fields is not None:
        row.set_field_names(fields)
    if row_kind is not None:
        row.set_row_kind(row_kind)
    return row


def _as_plain(value: Any) -> Any:
    if isinstance(value, Row):
        return value.as_dict(True)
    if isinstance(value, list):
        return [_as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    return value


__all__ = ["Row", "RowKind"]
