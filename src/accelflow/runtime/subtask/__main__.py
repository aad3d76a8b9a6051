"""``python -m accelflow.runtime.subtask FD FRAMEWORK PRELOAD_KEY [MODULE ...]``: a warm
subtask process, or with ``zygote`` first, the warm zygote that forks them (see ``_warm``),
spawned by its TaskExecutor."""

from accelflow.runtime.subtask._warm import main

main()
