"""``python -m accelflow.runtime.taskexecutor ID JM_ADDRESS CONFIG_JSON``."""

import sys

from accelflow.runtime.taskexecutor._early import start_forkserver

start_forkserver()  # first: its preloads import in parallel with this process's imports

from accelflow.runtime.taskexecutor import main  # noqa: E402

sys.exit(main())
