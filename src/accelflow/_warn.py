"""One format for every warning accelflow shows a person: ``accelflow: warning: <message>``.

Command-line code calls :func:`warn`, which writes that one line to stderr. Library code keeps
logging (``logging.getLogger(__name__).warning(...)``), so an embedding program can capture or
silence it; the ``accelflow`` command installs :class:`MessageFormatter`, which prints those
records in the same shape (``accelflow: warning: <message>``), like its errors
(``accelflow: error: <message>``).
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
