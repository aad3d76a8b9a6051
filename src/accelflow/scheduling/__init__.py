"""Exact amounts, the device ledger and pure placement decisions.

Amounts load at once (every process parses them); the ledger and placement load on first
use (PEP 562): a TaskExecutor and a subtask never place anything.
"""

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports
from accelflow.scheduling._amounts import (
    ONE,
    Amount,
    ResourceProfile,
    ResourceRequest,
    format_amount,
    parse_amount,
)
from accelflow.scheduling._memory import MEMORY_PROPERTY, device_memory, format_bytes, parse_memory

if TYPE_CHECKING:
    from accelflow.scheduling._assign import (
        Policy,
        SlotAssignment,
        SlotRequest,
        SubtaskRequest,
        TaskExecutorOffer,
        natural_key,
        place,
    )
    from accelflow.scheduling._index import CapacityIndex
    from accelflow.scheduling._ledger import DeviceKey, DeviceLedger, counted_address, is_counted
    from accelflow.scheduling._model import offer_from_ledger
    from accelflow.scheduling._packing import SEARCH_BUDGET

__all__ = [
    "MEMORY_PROPERTY",
    "ONE",
    "SEARCH_BUDGET",
    "Amount",
    "CapacityIndex",
    "DeviceKey",
    "DeviceLedger",
    "Policy",
    "ResourceProfile",
    "ResourceRequest",
    "SlotAssignment",
    "SlotRequest",
    "SubtaskRequest",
    "TaskExecutorOffer",
    "counted_address",
    "device_memory",
    "format_amount",
    "format_bytes",
    "is_counted",
    "natural_key",
    "offer_from_ledger",
    "parse_amount",
    "parse_memory",
    "place",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "._assign": ("Policy", "SlotAssignment", "SlotRequest", "SubtaskRequest", "TaskExecutorOffer", "natural_key", "place"),
    "._index": ("CapacityIndex",),
    "._ledger": ("DeviceKey", "DeviceLedger", "counted_address", "is_counted"),
    "._model": ("offer_from_ledger",),
    "._packing": ("SEARCH_BUDGET",),
})
