"""One subtask process: the operator runner, its data channels, partitioning and sinks."""

from accelflow.runtime.subtask._keys import stable_hash
from accelflow.runtime.subtask._runner import run_subtask

__all__ = [
    "run_subtask",
    "stable_hash",
]
