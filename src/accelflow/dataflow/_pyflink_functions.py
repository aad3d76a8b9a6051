"""PyFlink's names of the plain function contracts (``pyflink.datastream.functions``):
``MapFunction``, ``FlatMapFunction`` and ``FilterFunction`` are accelflow's rich functions (the
same classes: PyFlink's have ``open(runtime_context)`` and ``close()`` too), ``KeySelector``
and ``Partitioner`` are what ``key_by`` and ``partition_custom`` take besides a function.

Example:
    >>> class ByParity(KeySelector):
    ...     def get_key(self, value):
    ...         return value % 2
    >>> ByParity()(7)
    1
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from accelflow.dataflow._functions import RichFilterFunction, RichFlatMapFunction, RichMapFunction

IN = TypeVar("IN")
KEY = TypeVar("KEY")

#: PyFlink's ``MapFunction``: ``map(value)`` (accelflow's ``RichMapFunction``)
MapFunction = RichMapFunction
#: PyFlink's ``FlatMapFunction``: ``flat_map(value)`` yields outputs (``RichFlatMapFunction``)
FlatMapFunction = RichFlatMapFunction
#: PyFlink's ``FilterFunction``: ``filter(value)`` keeps the record when true (``RichFilterFunction``)
FilterFunction = RichFilterFunction


class KeySelector(ABC, Generic[IN, KEY]):
    """``get_key(value)``: the key of a record for ``key_by`` (calling it calls ``get_key``)."""

    @abstractmethod
    def get_key(self, value: IN) -> KEY: ...

    def __call__(self, value: IN) -> KEY:
        return self.get_key(value)


class Partitioner(ABC, Generic[KEY]):
    """``partition(key, num_partitions)``: the subtask of a key for ``partition_custom``."""

    @abstractmethod
    def partition(self, key: KEY, num_partitions: int) -> int: ...

    def __call__(self, key: KEY, num_partitions: int) -> Any:
        return self.partition(key, num_partitions)


__all__ = ["FilterFunction", "FlatMapFunction", "KeySelector", "MapFunction", "Partitioner"]
