"""Work directories: where the processes of a cluster keep their temporary files.

Each cluster on a host has one private (0700) directory ``$TMPDIR/accelflow-*``, made by the
process that owns the cluster: the client of an embedded cluster (its launcher), a session
cluster's process (``accelflow-session-*``, its submission socket) and each TaskExecutor
that runs as a Ray actor (``accelflow-ray-*``, on the actor's host). Everything the
cluster's processes write for themselves goes there: the JobManager's and the data
channels' sockets, the configuration file, multiprocessing's temporary directory of each
TaskExecutor, its subtasks, warm processes and device hosts (the forkserver's socket, a
user's ``multiprocessing.Manager``: :func:`accelflow.runtime.keep_tempdir_in`; spawned
processes are told it in ``$ACCELFLOW_WORK_DIR``), the watchdog's heartbeat and stack files,
the device hosts' sockets and NumPy source arrays where there is no memfd. Nothing goes into
a ``pymp-*`` directory of ``$TMPDIR``.

The owner removes its directory when the cluster stops. It cannot when it dies (SIGKILL, the
OOM killer): its ``owner`` file records its pid and start time, and the next cluster started
by the same user on that host (:func:`make_work_dir`) removes every ``accelflow-*``
directory whose owner has exited (:func:`sweep_work_dirs`, a pid reused by another process
does not count: its start time differs). Directories of other users, and those without an
``owner`` file (being made, or from an older accelflow), are left alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import psutil

from accelflow._parent import pid_namespace
from accelflow.runtime._statefile import SOCKET_PREFIX, same_process, write_private

#: the prefix of every work directory (a session cluster's is ``accelflow-session-``)
WORK_DIR_PREFIX = "accelflow-"
#: the file in a work directory that names its owner: ``<pid> <start time> <PID namespace>``
OWNER_FILE = "owner"
_OWNER = re.compile(r"^(?P<pid>[0-9]{1,10}) (?P<start>[0-9]{1,12}(?:\.[0-9]{1,6})?) (?P<ns>[0-9]{1,20})\n?$")
_log = logging.getLogger("accelflow.runtime")


def make_work_dir(prefix: str = WORK_DIR_PREFIX, *, sweep: bool = True) -> Path:
    """A new private (0700) work directory in ``$TMPDIR`` owned by this process, after
    removing those of this user's clusters whose owner died (``sweep``).

    Example:
        >>> path = make_work_dir(sweep=False)
        >>> path.name.startswith("accelflow-"), (path / "owner").read_text().split()[0] == str(os.getpid())
        (True, True)
        >>> shutil.rmtree(path)
    """
    if sweep:
        sweep_work_dirs()
    path = Path(tempfile.mkdtemp(prefix=prefix))
    write_private(path / OWNER_FILE, f"{os.getpid()} {psutil.Process().create_time():.3f} {pid_namespace() or 0}\n")
    return path



def socket_dir() -> Path:
    """A session cluster's socket directory: a work directory ``accelflow-session-*``."""
    return make_work_dir(SOCKET_PREFIX)


def sweep_work_dirs(base: Path | None = None) -> list[tuple[Path, int]]:
    """Remove this user's work directories in ``base`` (default ``$TMPDIR``) whose owner has
    exited; each removed one with its owner's pid, logged at debug level.

    Example:
        >>> with tempfile.TemporaryDirectory() as empty:  # nothing of ours there
        ...     sweep_work_dirs(Path(empty))
        []
    """
    base = Path(tempfile.gettempdir()) if base is None else base
    try:
        with os.scandir(base) as scan:  # a few ms for thousands of entries: on every cluster's start
            entries = [entry for entry in scan if entry.name.startswith(WORK_DIR_PREFIX)]
    except OSError:
        return []
    removed = []
    for entry in entries:
        pid = _dead_owner(entry)
        if pid is None:
            continue
        path = Path(entry.path)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            _log.debug("removed %s: the work directory of a cluster whose process (pid %d) died", path, pid)
            removed.append((path, pid))
    return removed


def _dead_owner(entry: os.DirEntry[str]) -> int | None:
    """The pid of the owner of work directory ``entry`` when that process has exited; None
    when it runs, or ``entry`` is not one of this user's work directories with an owner."""
    try:
        st = entry.stat(follow_symlinks=False)
        if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
            return None
        with open(os.path.join(entry.path, OWNER_FILE), encoding="ascii") as f:
            match = _OWNER.match(f.read(64))
    except (OSError, UnicodeDecodeError):
        return None
    if match is None or int(match["ns"]) != (pid_namespace() or 0) \
            or same_process(int(match["pid"]), float(match["start"]), None) is not None:
        return None
    return int(match["pid"])
