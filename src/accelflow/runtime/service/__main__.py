"""``python -m accelflow.runtime.service --log FILE [--conf FILE] [-D k=v ...]``: a session cluster."""

import signal
import sys

# Until main() takes them over, SIGINT (and SIGTERM) end this process quietly: nothing of the
# cluster exists yet. The blocked SIGINT of `accelflow cluster start` (see cli._cluster) is
# taken off here too.
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

from accelflow.runtime.service._session import main  # noqa: E402
from accelflow.runtime import whole_lines  # noqa: E402

whole_lines()  # its log is shared with its TaskExecutors and subtasks: whole lines each
sys.exit(main())
