"""A test hook, on ``PYTHONPATH`` only in tests/cli/test_interrupts.py: Python imports
``sitecustomize`` at start-up. With ``$ACCELFLOW_TEST_SLOW_IMPORT`` set to ``WHO:MODULE``,
the first import of ``MODULE`` in the process ``WHO`` names (``cli``: the ``accelflow``
command; ``zygote``: a ``python -c`` process, the zygote) touches the file
``$ACCELFLOW_TEST_SLOW_IMPORT_MARKER`` and then takes ``$ACCELFLOW_TEST_SLOW_IMPORT_S``
seconds: the test sends Ctrl-C while that import runs, at a point it knows."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

_SPEC = os.environ.get("ACCELFLOW_TEST_SLOW_IMPORT")


class _SlowImport:
    def __init__(self, who: str, module: str) -> None:
        self.who, self.module = who, module

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == self.module and (sys.argv[:1] == ["-c"]) == (self.who == "zygote"):
            sys.meta_path.remove(self)
            open(os.environ["ACCELFLOW_TEST_SLOW_IMPORT_MARKER"], "w").close()
            time.sleep(float(os.environ.get("ACCELFLOW_TEST_SLOW_IMPORT_S", "3")))
        return None


if _SPEC:
    sys.meta_path.insert(0, _SlowImport(*_SPEC.split(":", 1)))
