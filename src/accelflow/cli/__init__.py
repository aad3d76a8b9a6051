"""Command-line interface (``accelflow ...``)."""

from __future__ import annotations

import sys


def main() -> None:
    from accelflow.cli._main import main as _main

    sys.exit(_main())
