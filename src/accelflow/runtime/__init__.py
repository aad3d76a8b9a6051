"""The runtime: JobManager, TaskExecutors, subtasks and launchers (private modules)."""
