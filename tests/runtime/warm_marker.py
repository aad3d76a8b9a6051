"""Imported ahead by warm processes in the warm-device tests (``warm.preload``): says which
process imported it, in ``$WARM_MARKER_LOG``."""

import os

_log = os.environ.get("WARM_MARKER_LOG")
if _log:
    with open(_log, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
