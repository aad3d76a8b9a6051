"""``python -m accelflow.runtime.taskexecutor ID JM_ADDRESS CONFIG_JSON``."""

import os
import sys

from accelflow.runtime import whole_lines
from accelflow.runtime.taskexecutor._early import start_forkserver

whole_lines()

# first: its preloads import in parallel with this process's imports; its socket goes into the
# cluster's working directory, the configuration file's
start_forkserver(workdir=os.path.dirname(os.path.abspath(sys.argv[3])) if len(sys.argv) > 3 else None)

from accelflow.runtime.taskexecutor._taskexecutor import run_and_exit  # noqa: E402

run_and_exit()
