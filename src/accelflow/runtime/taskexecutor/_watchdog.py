"""The TaskExecutor's watchdog: finds its hung subtasks, dumps their stacks and kills them.

Each subtask writes a heartbeat, a progress counter, when it entered the user or device
code it is in now, and when it was last seen calling user code for another record, into four
numbers shared with this process (``runtime/subtask/_heartbeat.py``; the layout is repeated
here, as the TaskExecutor never imports the subtask runtime): a small file both map, so that a
forked subtask and one started in a warm process (spawned, not forked: ``_warmpool.py``) are
watched alike. Every
``heartbeat.interval`` the TaskExecutor checks them: a subtask in one call for longer than
``heartbeat.timeout``, or whose heartbeat is that old, is hung. The watchdog then has it write
every thread's stack (``SIGUSR1``: ``faulthandler``, registered in the subtask; plus
``py-spy dump`` with native frames where ``py-spy`` is installed), reports
``SubtaskFailed(SubtaskHung)`` with the stack to the JobManager, which fails it over, and
SIGKILLs it; its exit is reported as every subtask's is. The error's message shows only the
user's innermost frames (:func:`_where`); the whole dump is its ``stack`` and in the log. A
subtask waiting for a resident operator's call runs no user code itself: its device host
writes the stack of the thread running that call next to the dump file
(``RESIDENT_STACK_SUFFIX``), which the dump then ends with; killing such a subtask, the
watchdog leaves a mark (``RESIDENT_KILLED_SUFFIX``) by which the host knows that call hung.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from multiprocessing import util
from typing import Any

from accelflow._errors import SubtaskHung, encode_error
from accelflow.runtime import RESIDENT_KILLED_SUFFIX, RESIDENT_STACK_SUFFIX, SubtaskFailed, SubtaskKey

BEAT, PROGRESS, BUSY_SINCE, CALL_SINCE = 0, 1, 2, 3  # as runtime/subtask/_heartbeat.py
DUMP_SIGNAL = signal.SIGUSR1
#: how long the watchdog waits for a subtask to write its stacks
DUMP_WAIT_S = 1.0
_log = logging.getLogger("accelflow.runtime")
#: a frame of a ``faulthandler`` dump: file, line, function
_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$', re.MULTILINE)
#: how many of the user's frames the short stack shows
USER_FRAMES = 6


#: the shared numbers' size: four doubles
CELL_BYTES = 32


@dataclass
class _Watched:
    name: str
    cell: Any  # the four numbers (a ``memoryview`` of :attr:`shared`)
    shared: mmap.mmap
    cell_path: str
    dump_path: str
    started: float  # time.monotonic() at fork: a beat that never came is counted from here
    pid: int | None = None

    def close(self) -> None:
        self.cell.release()
        self.shared.close()
        for path in (self.cell_path, self.dump_path, self.dump_path + RESIDENT_STACK_SUFFIX):
            try:
                os.unlink(path)
            except OSError:
                pass


class Watchdog:
    """The hung-subtask checks of one TaskExecutor.

    Args:
        interval: ``heartbeat.interval`` (how often :meth:`check` is due).
        timeout: ``heartbeat.timeout``.
    """

    def __init__(self, interval: float, timeout: float) -> None:
        self.interval = interval
        self.timeout = timeout
        self.watched: dict[SubtaskKey, _Watched] = {}
        self.next_check = time.monotonic() + interval

    def watch(self, key: SubtaskKey, name: str) -> tuple[str, str, float]:
        """Watch subtask ``key`` from now on; what its process needs (``run_subtask``'s
        ``watch`` argument: the file of the shared numbers, the stack file and the interval)."""
        fd, cell_path = tempfile.mkstemp(prefix="beat-", dir=util.get_temp_dir())
        try:
            os.ftruncate(fd, CELL_BYTES)  # zeros: no beat yet, not busy
            shared = mmap.mmap(fd, CELL_BYTES)
        finally:
            os.close(fd)
        fd, dump_path = tempfile.mkstemp(prefix="stack-", suffix=".txt", dir=util.get_temp_dir())
        os.close(fd)
        self.forget(key)
        self.watched[key] = _Watched(name, memoryview(shared).cast("d"), shared, cell_path, dump_path,
                                     time.monotonic())
        return cell_path, dump_path, self.interval

    def started(self, key: SubtaskKey, pid: int | None) -> None:
        if key in self.watched:
            self.watched[key].pid = pid

    def rename(self, old: SubtaskKey, new: SubtaskKey) -> None:
        if old in self.watched:
            self.watched[new] = self.watched.pop(old)

    def forget(self, key: SubtaskKey) -> None:
        watched = self.watched.pop(key, None)
        if watched is not None:
            watched.close()

    def due_in(self) -> float | None:
        """Seconds until the next :meth:`check` (None: nothing to watch)."""
        return max(0.0, self.next_check - time.monotonic()) if self.watched else None

    def check(self) -> list[SubtaskFailed]:
        """Kill the hung subtasks (when due); the failures to report, one per subtask."""
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + self.interval
        return [self._kill(key, why) for key, w in list(self.watched.items())
                if w.pid is not None and (why := self._hung(w, now)) is not None]

    def _hung(self, w: _Watched, now: float) -> str | None:
        busy, beat = w.cell[BUSY_SINCE], w.cell[BEAT] or w.started
        busy = busy and max(busy, w.cell[CALL_SINCE])  # a per-record call began later
        if busy and now - busy > self.timeout:
            return f"it has been inside one call of user or device code for {now - busy:.1f} s"
        if now - beat > self.timeout:
            return f"its heartbeat stopped {now - beat:.1f} s ago (the whole process is stuck)"
        return None

    def _kill(self, key: SubtaskKey, why: str) -> SubtaskFailed:
        w = self.watched.pop(key)
        assert w.pid is not None
        stack = _stack(w.pid, w.dump_path)
        resident = w.dump_path + RESIDENT_STACK_SUFFIX
        if os.path.exists(resident):  # hung in a resident call: its device host drops the instance
            open(resident + RESIDENT_KILLED_SUFFIX, "w").close()
        w.close()
        try:
            os.kill(w.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        message = (f"subtask {w.name} is hung and was killed: {why}, more than heartbeat.timeout "
                   f"({self.timeout:g} s); {_where(stack)}")
        _log.warning("%s\nits threads were at:\n%s", message, stack)
        error = SubtaskHung(message, subtask=w.name, timeout_s=self.timeout, stack=stack)
        return SubtaskFailed(key, encode_error(error))


def _stack(pid: int, dump_path: str) -> str:
    """Every thread's stack of process ``pid``: ``faulthandler``'s (and ``py-spy``'s)."""
    try:
        os.kill(pid, DUMP_SIGNAL)
    except ProcessLookupError:
        return "(the process had already exited)"
    deadline = time.monotonic() + DUMP_WAIT_S
    text, size = "", -1
    while time.monotonic() < deadline:  # until it stops growing
        time.sleep(0.05)
        with open(dump_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if text and len(text) == size:
            break
        size = len(text)
    try:
        os.unlink(dump_path)
    except OSError:
        pass
    try:  # a resident operator's call this subtask waits for, as its device host wrote it
        with open(dump_path + RESIDENT_STACK_SUFFIX, encoding="utf-8", errors="replace") as f:
            text = text.rstrip("\n") + "\n\n" + f.read()
    except OSError:
        pass
    spy = shutil.which("py-spy")
    if spy is not None:
        try:
            done = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True,
                                  text=True, timeout=10, check=False)
            if done.returncode == 0:
                text += "\npy-spy dump --native:\n" + done.stdout
        except (OSError, subprocess.SubprocessError):
            pass
    return text.strip() or "(the process wrote no stack)"


def _where(stack: str) -> str:
    """Where the hung subtask was, short: the innermost frames of user code (not accelflow's,
    the standard library's or an installed package's) of the thread that runs it, innermost
    first; the whole dump stays in the log and in ``SubtaskHung.stack``.

    Example (a map sleeping in ``lookup``)::

        it was at (innermost first):
          File "/home/me/job.py", line 5 in lookup
        (every thread's whole stack: SubtaskHung.stack, and the TaskExecutor's log)
    """
    blocks = re.split(r"\n\s*\n", stack.split("\npy-spy dump")[0])
    blocks.sort(key=lambda block: "Current thread" not in block)  # the signalled (main) thread first
    threads: list[list[tuple[str, str, str]]] = [t for block in blocks if (t := _FRAME.findall(block))]
    frames = next((t for t in threads if any(_is_user(f[0]) for f in t)), [])
    header = next((b.lstrip().splitlines()[0] for b in blocks if frames and _FRAME.findall(b) == frames), "")
    where = ""
    if header.startswith("Resident operator"):  # "Resident operator 'x' in its device host (pid 7), the thread..."
        where = ", in " + header.split(", the thread")[0].replace("Resident", "resident", 1)
    if not frames:
        shown = threads[0][:USER_FRAMES] if threads else []
    else:
        shown = [f for f in frames if _is_user(f[0])][:USER_FRAMES]
        if not _is_user(frames[0][0]):
            shown.insert(0, frames[0])  # where it waits (e.g. a socket), then the user's calls
    lines = "".join(f'\n  File "{file}", line {line} in {name}' for file, line, name in shown)
    return (f"it was at (innermost first){where}:{lines or ' (no stack was written)'}\n"
            "(every thread's whole stack: SubtaskHung.stack, and the TaskExecutor's log)")


def _is_user(filename: str) -> bool:
    """Whether ``filename`` is user code: not accelflow's, the interpreter's or a package's."""
    return not filename.startswith(("<", *_NOT_USER))


_NOT_USER = tuple({os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep,
                   *(sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib"))})
