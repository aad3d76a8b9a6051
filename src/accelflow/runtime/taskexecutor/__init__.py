"""The TaskExecutor process: drivers once at start-up, slots, one forked process per subtask."""

from accelflow.runtime.taskexecutor._taskexecutor import (
    AUTHKEY_ENV_VAR,
    TaskExecutor,
    main,
    start_forkserver,
)

__all__ = ["AUTHKEY_ENV_VAR", "TaskExecutor", "main", "start_forkserver"]
