"""The client side of a job: submitting it and waiting for it (runs in the user's process)."""

from accelflow.runtime.client._client import JobClient, submit, warm_up
from accelflow.runtime.client._context import (
    DEFAULT_CONTEXT,
    ExecutionContext,
    ProgressHook,
    ProgressSource,
    current_context,
    use_context,
)

__all__ = [
    "DEFAULT_CONTEXT",
    "ExecutionContext",
    "JobClient",
    "ProgressHook",
    "ProgressSource",
    "current_context",
    "submit",
    "use_context",
    "warm_up",
]
