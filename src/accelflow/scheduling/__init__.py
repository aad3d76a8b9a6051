"""Exact amounts, the device ledger and pure placement decisions.

Amounts load at once (every process parses them); the ledger and placement load on first
use (PEP 562): a TaskExecutor and a subtask never place anything.
"""

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports
from accelflow.scheduling._amounts import ONE, Amount, ResourceProfile, format_amount, parse_amount

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

__all__ = [
    "ONE",
    "Amount",
    "CapacityIndex",
    "DeviceKey",
    "DeviceLedger",
    "Policy",
    "ResourceProfile",
    "SlotAssignment",
    "SlotRequest",
    "SubtaskRequest",
    "TaskExecutorOffer",
    "counted_address",
    "format_amount",
    "is_counted",
    "natural_key",
    "parse_amount",
    "place",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "._assign": ("Policy", "SlotAssignment", "SlotRequest", "SubtaskRequest", "TaskExecutorOffer", "natural_key", "place"),
    "._index": ("CapacityIndex",),
    "._ledger": ("DeviceKey", "DeviceLedger", "counted_address", "is_counted"),
})
