"""The client side of a job: submitting it and waiting for it (runs in the user's process)."""

from accelflow.runtime.client._client import JobClient, warm_up
from accelflow.runtime.client._context import (
    DEFAULT_CONTEXT,
    ExecutionContext,
    ProgressHook,
    ProgressSource,
    current_context,
    use_context,
)
from accelflow.runtime.client._sessions import (
    find_session, refuse_taken_port, running_sessions, session_config, sweep_stale,
)
from accelflow.runtime.client._submit import submit

__all__ = [
    "DEFAULT_CONTEXT",
    "ExecutionContext",
    "JobClient",
    "ProgressHook",
    "ProgressSource",
    "current_context",
    "find_session",
    "refuse_taken_port",
    "running_sessions",
    "session_config",
    "submit",
    "sweep_stale",
    "use_context",
    "warm_up",
]
