"""Imported ahead by warm processes in the tests of waiting for a warm process that is still
starting (``warm.preload``): its import takes a while, as a framework's does, and says so in
``$SLOW_MARKER_LOG``: ``<pid> start`` when it begins, ``<pid> done`` when it ends.

It ends after ``$SLOW_MARKER_S`` seconds (default 1), or, with ``$SLOW_MARKER_UNTIL`` set to
``FILE<TAB>REGEX[<TAB>N]``, once N lines (default 1) of FILE match REGEX (at most 60 s): a test
keeps the process "still starting" until the TaskExecutor did what the test waits for. With
``$SLOW_MARKER_DIE`` set, the first process to get that far exits with code 3 instead
(``<pid> died``): a warm process that dies while starting. With ``$SLOW_MARKER_HANG`` set to N (or N,M,...), the N-th process
to import it hangs there (60 s): a warm process that never gets ready.
"""

import os
import re
import time


def _say(word: str) -> None:
    with open(os.environ["SLOW_MARKER_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {word}\n")


def _count(path: str, pattern: str) -> int:
    """The lines of ``path`` that match ``pattern``."""
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for line in f if re.search(pattern, line))
    except FileNotFoundError:
        return 0


def _matched(path: str, pattern: str, times: str = "1") -> bool:
    return _count(path, pattern) >= int(times)


if os.environ.get("SLOW_MARKER_LOG"):
    _say("start")
    if str(_count(os.environ["SLOW_MARKER_LOG"], " start$")) in os.environ.get("SLOW_MARKER_HANG", "").split(","):
        time.sleep(60)
    until = os.environ.get("SLOW_MARKER_UNTIL")
    deadline = time.monotonic() + (60.0 if until else float(os.environ.get("SLOW_MARKER_S", "1")))
    while time.monotonic() < deadline and not (until and _matched(*until.split("\t"))):
        time.sleep(0.02)
    if os.environ.get("SLOW_MARKER_DIE") and not _matched(os.environ["SLOW_MARKER_LOG"], " died$"):
        _say("died")
        os._exit(3)
    _say("done")
