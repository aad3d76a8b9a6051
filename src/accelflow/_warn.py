"""One format for every warning accelflow shows a person: ``accelflow: warning: <message>``.

Command-line code calls :func:`warn`, which writes that one line to stderr. Library code keeps
logging (``logging.getLogger(__name__).warning(...)``), so an embedding program can capture or
silence it; the ``accelflow`` command installs :class:`MessageFormatter`, which prints those
records in the same shape (``accelflow: warning: <message>``), like its errors
(``accelflow: error: <message>``). Every accelflow process that shows its stderr to a person
(the command, a TaskExecutor, a Ray actor) calls :func:`configure_logging` once at start.
"""

from __future__ import annotations

import logging
import sys

PREFIX = "accelflow"


def warn(message: str) -> None:
    """Write ``accelflow: warning: <message>`` to stderr (one line per line of ``message``).

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as err:
        ...     warn("-D after the job script goes to the script")
        >>> err.getvalue()
        'accelflow: warning: -D after the job script goes to the script\\n'
    """
    print(f"{PREFIX}: warning: {message}", file=sys.stderr, flush=True)


class MessageFormatter(logging.Formatter):
    """Log records as ``accelflow: <level>: <message>``; below WARNING (``-v``) the logger's
    name follows the level, ``accelflow: debug: accelflow.runtime...: <message>``."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)  # the message with its traceback, if any
        level = record.levelname.lower()
        if record.levelno < logging.WARNING:
            return f"{PREFIX}: {level}: {record.name}: {message}"
        return f"{PREFIX}: {level}: {message}"


def configure_logging(*, verbose: bool = False) -> None:
    """Print this process's log records on stderr as :class:`MessageFormatter` shapes them:
    WARNING and above, or everything from DEBUG with ``verbose``. Does nothing when the root
    logger already has a handler (an embedding program or pytest configured logging)."""
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(MessageFormatter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])
