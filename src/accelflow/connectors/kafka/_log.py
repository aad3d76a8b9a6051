"""librdkafka's log, rate-limited: the ``logger`` every client of the connector gets.

Left to itself, librdkafka writes each failed connection attempt to stderr: with a broker gone,
about 20 lines a second per client (``Connect to ipv4#... failed: Connection refused``), for as
long as the client lives. :class:`RateLimitedLog` passes each kind of message on once per
:data:`WINDOW_S` per process (a kind: the message with its numbers blanked out), then says how
many of that kind it held back, to the Python logger ``accelflow.connectors.kafka.librdkafka``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

#: a kind of message is passed on at most once per this many seconds
WINDOW_S = 60.0
LOGGER_NAME = "accelflow.connectors.kafka.librdkafka"

_NUMBERS = re.compile(r"\d+")
_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")


class RateLimitedLog:
    """A ``logger`` for confluent-kafka clients (it calls ``log(level, fmt, *args)``) that lets
    each kind of message through once per ``window_s`` seconds.

    librdkafka's errors (a refused connection, a broker down) are ones it retries on its own,
    so they are logged as warnings; the connector raises :class:`KafkaConnectorError` when it
    gives up (see ``accelflow.unreachable.timeout.ms``).

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> logger = logging.getLogger("example.librdkafka")
        >>> logger.addHandler(logging.StreamHandler(out)); logger.propagate = False
        >>> log = RateLimitedLog(logger)
        >>> for port in (40001, 40002, 40003):
        ...     log.log(40, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
        ...             f"127.0.0.1:{port}/1: Connect to ipv4#127.0.0.1:{port} failed: Connection refused")
        >>> print(out.getvalue().strip())
        librdkafka FAIL (rdkafka#consumer-1): 127.0.0.1:40001/1: Connect to ipv4#127.0.0.1:40001 failed: Connection refused
    """

    def __init__(self, logger: logging.Logger | None = None, window_s: float = WINDOW_S) -> None:
        self._logger = logger or logging.getLogger(LOGGER_NAME)
        self._window_s = window_s
        self._lock = threading.Lock()
        #: kind -> (when it was last passed on, how many were held back since)
        self._seen: dict[str, tuple[float, int]] = {}

    def log(self, level: int, fmt: str, *args: Any) -> None:
        """What confluent-kafka calls: ``fmt % args`` is ``"FAC [client] message"``."""
        facility, client, message = (str(a) for a in args) if len(args) == 3 else ("", "", fmt % args)
        message = _THREAD.sub("", message)
        kind = f"{facility} {_NUMBERS.sub('#', message)}"
        now = time.monotonic()
        with self._lock:
            last, held = self._seen.get(kind, (None, 0))
            if last is not None and now - last < self._window_s:
                self._seen[kind] = (last, held + 1)
                return
            self._seen[kind] = (now, 0)
        more = f" ({held} more like it in the last {self._window_s:g} s)" if held else ""
        self._logger.log(min(level, logging.WARNING), "librdkafka %s (%s): %s%s", facility, client, message, more)


#: the one every client of this process shares: a kind is rate-limited across clients
LIBRDKAFKA_LOG = RateLimitedLog()


def with_logger(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with :data:`LIBRDKAFKA_LOG` as its ``logger``, unless the user gave one."""
    return conf if "logger" in conf else {**conf, "logger": LIBRDKAFKA_LOG}
