"""``python -m accelflow.runtime.subtask FD FRAMEWORK PRELOAD_KEY [MODULE ...]``: a warm
subtask process (see ``_warm``), spawned by its TaskExecutor for one device."""

from accelflow.runtime.subtask._warm import main

main()
