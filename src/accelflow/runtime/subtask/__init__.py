"""One subtask process: the operator runner, its data channels, partitioning and sinks; and,
for a device host (``runtime/devicehost``), the device stage of ``map_batches`` and the
joining of chunks, which its resident instances run too. ``python -m`` this package: a warm
subtask process (``_warm``)."""

from accelflow.runtime.subtask._calls import bind
from accelflow.runtime.subtask._keys import stable_hash
from accelflow.runtime.subtask._device import DRAIN_AFTER_S, DeviceStage, PlainStage, open_stage
from accelflow.runtime.subtask._operators import join_chunks
from accelflow.runtime.subtask._resident import WINDOW
from accelflow.runtime.subtask._resident_ring import SharedChunks
from accelflow.runtime.subtask._runner import run_subtask

__all__ = [
    "DRAIN_AFTER_S",
    "DeviceStage",
    "PlainStage",
    "SharedChunks",
    "WINDOW",
    "bind",
    "join_chunks",
    "open_stage",
    "run_subtask",
    "stable_hash",
]
