"""``python -m accelflow.runtime.taskexecutor ID JM_ADDRESS CONFIG_JSON``."""

from accelflow.runtime.taskexecutor._early import start_forkserver

start_forkserver()  # first: its preloads import in parallel with this process's imports

from accelflow.runtime.taskexecutor._taskexecutor import run_and_exit  # noqa: E402

run_and_exit()
