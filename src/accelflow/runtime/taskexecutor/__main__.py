"""``python -m accelflow.runtime.taskexecutor ID JM_ADDRESS CONFIG_JSON``."""

import atexit
import os
import sys

from accelflow.runtime.taskexecutor._early import start_forkserver

start_forkserver()  # first: its preloads import in parallel with this process's imports

from accelflow.runtime.taskexecutor import main  # noqa: E402

code = main()
# Subtasks stopped, devices given back: what is left is the exit callbacks (logging's flush,
# multiprocessing's removal of the forkserver's socket directory) and the interpreter's
# teardown of every module, 25-50 ms on the way to the client's wait for this process.
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
