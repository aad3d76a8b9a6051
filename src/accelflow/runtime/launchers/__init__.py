"""Launchers: where TaskExecutors run (local processes; Ray actors later)."""
