"""The session cluster's process: submissions, the REST API, Prometheus metrics, the web UI."""

from accelflow.runtime.service._metrics import render_metrics
from accelflow.runtime.service._rest import RestServer
from accelflow.runtime.service._snapshot import checkpoints_view, retained_checkpoint
from accelflow.runtime.service._session import SessionCluster
from accelflow.runtime.service._statefile import (
    SessionInfo,
    find_session,
    running_sessions,
    session_config,
    session_process,
    state_dir,
    sweep_stale,
)

__all__ = [
    "RestServer",
    "SessionCluster",
    "SessionInfo",
    "find_session",
    "checkpoints_view",
    "render_metrics",
    "retained_checkpoint",
    "running_sessions",
    "session_config",
    "session_process",
    "state_dir",
    "sweep_stale",
]
