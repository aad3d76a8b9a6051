"""Imported first by the TaskExecutor's forkserver (as a preload module): makes it die with
the TaskExecutor, and makes its stdout and stderr (which every subtask inherits) write whole
lines (``accelflow.runtime.whole_lines``).

Every subtask holds the forkserver's "alive" pipe, so a forkserver outlives a SIGKILLed
TaskExecutor for as long as any subtask runs, and the subtasks (whose parent-death signal
is tied to the forkserver, their parent) then run on with their devices, possibly forever.
With the forkserver tied to the TaskExecutor, a dead TaskExecutor takes both down.

Only the forkserver imports this module; importing it elsewhere would tie that process to
its parent too.
"""

from accelflow.runtime import die_with_parent, expected_parent, whole_lines

die_with_parent(parent=expected_parent())  # the TaskExecutor may have died before this line
whole_lines()
