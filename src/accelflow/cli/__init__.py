"""Command-line interface (``accelflow ...``).

Ctrl-C before a command has installed its own handling (while ``accelflow run`` still imports
NumPy and the runtime, the first few tenths of a second) ends the command with one line and
exit code 130, as later, never with a traceback through the imports.

A reader that goes before the output ends (``accelflow cluster status | head -1``) ends the
command quietly with exit code 141 (128 + SIGPIPE), what the shell shows for ``ls``, ``cat`` or
``git`` in the same place (the Python documentation's recipe for SIGPIPE).
"""

from __future__ import annotations

import os
import select
import signal
import sys

#: the exit code when stdout's reader has gone: 128 + SIGPIPE, as a process killed by it
CLOSED_PIPE_EXIT_CODE = 128 + signal.SIGPIPE


def main() -> None:
    code: int | str | None
    try:
        from accelflow.cli._main import main as _main

        try:
            code = _main()
        except SystemExit as exc:  # argparse's --help, --version and usage errors
            code = exc.code
        sys.stdout.flush()  # inside: the last lines may still be buffered
    except KeyboardInterrupt:
        print("accelflow: interrupted", file=sys.stderr, flush=True)
        code = 130
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe or socket (a session cluster that died): not the reader's doing
        code = CLOSED_PIPE_EXIT_CODE
    if code == 130:  # interrupted: a second Ctrl-C while the interpreter exits must not kill it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it; if so, stdout becomes /dev/null, so
    that the interpreter's last flush at exit does not fail again (and print a traceback).

    Linux reports ``POLLERR`` on the writing end of a pipe without readers.
    """
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, ValueError, OSError):
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone
