"""One subtask process: the operator runner, its data channels, partitioning and sinks."""

from accelflow.runtime.subtask._channels import (
    CONNECT_TIMEOUT_S,
    RELAY_DIR_ENV_VAR,
    RELAY_PREFIX,
    RELAY_SOCKET,
    connect_unix,
)
from accelflow.runtime.subtask._partition import stable_hash
from accelflow.runtime.subtask._runner import run_subtask

__all__ = [
    "CONNECT_TIMEOUT_S",
    "RELAY_DIR_ENV_VAR",
    "RELAY_PREFIX",
    "RELAY_SOCKET",
    "connect_unix",
    "run_subtask",
    "stable_hash",
]
