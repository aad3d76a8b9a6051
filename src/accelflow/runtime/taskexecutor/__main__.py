"""``python -m accelflow.runtime.taskexecutor ID JM_ADDRESS CONFIG_JSON``."""

import sys

from accelflow.runtime.taskexecutor import main

sys.exit(main())
