"""``SingleFileSink``: what ``stream.sink_to_file(path)`` writes through, one text file that
is complete when the job succeeds and absent (or unchanged) when it fails.

It is a two-phase-commit :class:`~accelflow.dataflow.Sink` with a job-level commit (Flink's
global committer):

- in each sink subtask it writes one line per record (``str(record)``) into a part file next to
  the target (see :mod:`._file_parts`: a new private file, never through a symlink); at the end
  of its input it closes the part and hands it over as its committable
  (:class:`~._file_parts.TargetPart`), which the subtask's own commit leaves as it is;
- in the process that runs the JobManager, :meth:`SingleFileSink.open_job` takes the target's
  lock before any subtask starts (a second job on it fails at once; parts of runs that are
  over go), :meth:`SingleFileSink.commit_job` joins the parts, in subtask order, into the
  target (one ``os.replace``) once the job has succeeded, and
  :meth:`SingleFileSink.close_job` removes this run's parts and gives the lock back.

On a machine of its own (the Ray target with no shared filesystem: a subtask that does not see
the lock file the JobManager holds next to the target, with the token it was sent), a subtask
creates the missing directory (0700), its committable carries the part's bytes to the
JobManager, and it removes the part, and the directories it made when they are empty, when it
closes. The bytes travel in the final checkpoint's acknowledgement, so for large outputs across
machines prefer a shared filesystem (nothing travels then) or
:class:`~accelflow.connectors.files.FileSink`.

Example::

    import pathlib, tempfile
    from accelflow import Environment

    with tempfile.TemporaryDirectory() as out:
        env = Environment()
        env.from_sequence(1, 100).map(lambda x: x * x).sink_to_file(f"{out}/squares.txt", parallelism=2)
        env.execute()
        assert len(pathlib.Path(out, "squares.txt").read_text().splitlines()) == 100
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from accelflow._errors import ConfigError
from accelflow.connectors._file_parts import (
    TargetPart, create_part, holding, join_parts, lock_token, remove_parts,
)
from accelflow.dataflow import RuntimeContext, Sink, iter_records


class SingleFileSink(Sink[Any]):
    """One line per record (``str(record)``) into ``path``, atomically (see the module).

    Raises:
        ConfigError: ``path`` is not a path, its directory does not exist, or it is a directory.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, str | os.PathLike):
            raise ConfigError(f"needs a file path (a str or os.PathLike), got {type(path).__name__} ({path!r:.60})",
                              key="sink_to_file(path)")
        target = Path(path).absolute()
        if not target.parent.is_dir():
            raise ConfigError(f"directory {str(target.parent)!r} does not exist", key=f"sink_to_file({str(path)!r})")
        if target.is_dir():
            raise ConfigError("is a directory; give a file path", key=f"sink_to_file({str(path)!r})")
        self._reset(str(target), None)

    def _reset(self, target: str, token: str | None) -> None:
        #: what the target's lock file holds while the JobManager holds it (``open_job``): a
        #: subtask that does not read the same there is on a machine of its own
        self.target, self._token = target, token
        self._hold: ExitStack | None = None  # the target's lock, in the JobManager's process
        self._file: TextIO | None = None  # a subtask's part, and what it knows of it
        self._part = ""
        self._ended = self._remote = False
        self._made: list[str] = []  # directories this subtask created (parents first)

    def __repr__(self) -> str:
        return f"SingleFileSink({self.target!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"target": self.target, "token": self._token}  # what a subtask needs, never the lock

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._reset(state["target"], state["token"])

    # -- a sink subtask --------------------------------------------------------------------------
    def open(self, ctx: RuntimeContext) -> None:
        directory = os.path.dirname(self.target)
        if not os.path.isdir(directory):  # a machine of its own (or it was removed meanwhile)
            self._made = _make_directories(directory)
        self._remote = lock_token(self.target) != self._token
        # a new file with a random name, 0600, never through a symlink (see _file_parts)
        fd, self._part = create_part(self.target, ctx.index_of_this_subtask, ctx.attempt_number)
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, chunk: Any) -> None:
        assert self._file is not None
        self._file.write("".join(f"{r}\n" for r in iter_records(chunk)))

    def end_of_input(self) -> None:
        self._ended = True

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Nothing before the end of the input (the file appears when the job succeeds); then
        the closed part, once."""
        if not self._ended or self._file is None:
            return []
        self._close_part()
        size = os.path.getsize(self._part)
        data = Path(self._part).read_bytes() if self._remote else None
        return [TargetPart(self._part, size, data)]

    def close(self) -> None:
        if self._file is not None:
            self._close_part()
        if self._remote:  # nobody else can clean up on this machine
            _remove_file(self._part)
            for directory in reversed(self._made):
                try:
                    os.rmdir(directory)  # only when empty: never anything of someone else's
                except OSError:
                    pass

    def _close_part(self) -> None:
        file, self._file = self._file, None
        assert file is not None
        file.flush()
        os.fsync(file.fileno())
        file.close()

    # -- the job, in the JobManager's process ------------------------------------------------------
    def open_job(self) -> None:
        """Take the target's lock (removing the parts of runs that are over).

        Raises:
            JobError: another running job writes the target, or its lock file is not a
                regular file of this user.
        """
        hold = ExitStack()
        hold.enter_context(holding(self.target))
        self._hold = hold
        self._token = lock_token(self.target)

    def commit_job(self, committables: Sequence[Sequence[Any]]) -> None:
        """Join every subtask's part, in subtask order, into the target, and remove them.

        Raises:
            JobError: a part is gone or was replaced (see ``join_parts``).
        """
        parts = [part for mine in committables for part in mine]
        if not all(isinstance(p, TargetPart) for p in parts):
            raise TypeError(f"SingleFileSink.commit_job: expected TargetPart committables, got {parts!r:.200}")
        join_parts(parts, self.target)
        for part in parts:
            if part.data is None:
                _remove_file(part.path)

    def close_job(self, committed: bool) -> None:
        """Remove the parts left next to the target (of attempts that failed, or of a job
        that published nothing) and give the lock back."""
        hold, self._hold = self._hold, None
        if hold is None:
            return
        try:
            remove_parts(self.target)
        finally:
            hold.close()


def _make_directories(directory: str) -> list[str]:
    """Create ``directory`` and its missing parents (0700); those created, parents first."""
    missing = []
    path = os.path.abspath(directory)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return []  # creating the part then fails, naming the path
    return list(reversed(missing))


def _remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
