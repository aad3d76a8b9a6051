"""Command-line interface (``accelflow ...``).

Ctrl-C before a command has installed its own handling (while ``accelflow run`` still imports
NumPy and the runtime, the first few tenths of a second) ends the command with one line and
exit code 130, as later, never with a traceback through the imports.
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    try:
        from accelflow.cli._main import main as _main

        code = _main()
    except KeyboardInterrupt:
        print("accelflow: interrupted", file=sys.stderr, flush=True)
        code = 130
    if code == 130:  # interrupted: a second Ctrl-C while the interpreter exits must not kill it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
