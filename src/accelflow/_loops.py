"""The per-record loop of user code running now in this process, for the hung-subtask
watchdog (``runtime/subtask/_heartbeat.py``): ``map``, ``flat_map`` and ``filter`` over a
chunk, or a Kafka source's deserializers over a poll's messages, put their iterator in
:data:`LOOP`, whose length hint (records left) the heartbeat thread reads, so a loop of many
quick calls is not one long call, at no cost per record. A root module: the runtime and the
connectors (which the runtime imports) both mark their loops.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

#: the iterator over the records of the per-record loop running now (one slot, set once per
#: chunk by :func:`watched`): its length hint falls by one per call of user code
LOOP: list[Any] = [None]


def watched(records: Iterator[Any]) -> Iterator[Any]:
    """``records`` as the iterator of the per-record loop running now (see :data:`LOOP`); one
    without a length hint (e.g. a ``zip`` over columns) is listed first.

    Example:
        >>> [r * 2 for r in watched(iter([1, 2, 3]))]
        [2, 4, 6]
    """
    if operator.length_hint(records, -1) < 0:
        records = iter(list(records))
    LOOP[0] = records
    return records
