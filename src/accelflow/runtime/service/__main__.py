"""``python -m accelflow.runtime.service --log FILE [--conf FILE] [-D k=v ...]``: a session cluster."""

import sys

from accelflow.runtime.service._session import main

sys.exit(main())
