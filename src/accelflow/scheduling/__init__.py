"""Exact amounts, the device ledger and pure placement decisions."""

from accelflow.scheduling._amounts import ONE, Amount, ResourceProfile, format_amount, parse_amount
from accelflow.scheduling._assign import (
    SlotAssignment,
    SlotRequest,
    SubtaskRequest,
    TaskExecutorOffer,
    natural_key,
    place,
)
from accelflow.scheduling._ledger import DeviceKey, DeviceLedger

__all__ = [
    "ONE",
    "Amount",
    "DeviceKey",
    "DeviceLedger",
    "ResourceProfile",
    "SlotAssignment",
    "SlotRequest",
    "SubtaskRequest",
    "TaskExecutorOffer",
    "format_amount",
    "natural_key",
    "parse_amount",
    "place",
]
