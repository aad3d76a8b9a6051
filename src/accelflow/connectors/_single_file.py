"""``SingleFileSink``: what ``stream.sink_to_file(path)`` writes through, one text file that
is complete when the job succeeds and absent (or unchanged) when it fails.

It is a two-phase-commit :class:`~accelflow.dataflow.Sink` with a job-level commit (Flink's
global committer):

- in each sink subtask it writes one line per record (``str(record)``) into a part file next to
  the target (see :mod:`._file_parts`: a new private file, never through a symlink). At each
  checkpoint's barrier it seals the part (closed, fsynced, renamed to a sealed name) and starts
  a new one: the checkpoint's state names every part sealed so far, in order, with its size
  (:class:`~._file_parts.TargetPart`). A subtask restored from that checkpoint (after a full
  restart, a rollback in place, a standby taking over, or in a job resumed from a savepoint)
  keeps those parts and writes only the records after it into new ones; a part written after
  the checkpoint is never named, so its records are not kept twice. At the end of its input it
  seals the last part and hands over all of its parts as its committables, which the
  subtask's own commit leaves as they are;
- in the process that runs the JobManager, :meth:`SingleFileSink.open_job` takes the target's
  lock before any subtask starts (a second job on it fails at once; unsealed parts of runs
  that are over go), :meth:`SingleFileSink.commit_job` joins the parts, in subtask order, into
  the target (one ``os.replace``) once the job has succeeded, and
  :meth:`SingleFileSink.close_job` gives the lock back after removing this run's unsealed
  parts, and, when the job succeeded, every sealed part next to the target too. The sealed
  parts of a job that failed, was cancelled or stopped with a savepoint stay (hidden): its
  retained checkpoints or savepoint name them. Restoring a checkpoint whose parts are gone
  (a later run on the same target succeeded) fails with a :class:`~accelflow.CheckpointError`
  naming the part.

On a machine of its own (the Ray target with no shared filesystem: a subtask that does not see
the lock file the JobManager holds next to the target, with the token it was sent), a subtask
creates the missing directory (0700), a sealed part's bytes travel in the checkpoint's state
and its committable to the JobManager (the file is removed at once), and it removes the
directories it made when they are empty, when it closes. Every checkpoint's acknowledgement
then carries all the bytes written so far, so for large outputs across machines prefer a
shared filesystem (nothing travels then) or :class:`~accelflow.connectors.files.FileSink`.

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
import stat
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from accelflow._errors import CheckpointError, ConfigError
from accelflow.connectors._file_parts import (
    TargetPart, create_part, holding, join_parts, lock_token, remove_parts, seal_part,
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
        self._resumable = True  # whether a checkpoint of the job may name its sealed parts
        self._file: TextIO | None = None  # a subtask's part being written, and what it knows of it
        self._part = ""
        self._index = self._attempt = 0
        self._sealed: list[TargetPart] = []  # its sealed parts, in order: what a checkpoint names
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
        self._index, self._attempt = ctx.index_of_this_subtask, ctx.attempt_number
        self._sealed, self._ended = [], False  # opened again by a rollback in place: all anew
        self._open_part()

    def write(self, chunk: Any) -> None:
        assert self._file is not None
        self._file.write("".join(f"{r}\n" for r in iter_records(chunk)))

    def end_of_input(self) -> None:
        self._ended = True

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Seal the part written since the last call (:meth:`snapshot_state` names it).
        Nothing is published before the end of the input (the file appears when the job
        succeeds); from then on, every sealed part, in order: the job's final committables."""
        if self._file is not None:
            self._seal()
            if not self._ended:
                self._open_part()
        return list(self._sealed) if self._ended else []

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The target and every part sealed so far (restored with the checkpoint)."""
        return {"target": self.target, "parts": list(self._sealed)}

    def restore_state(self, state: Any) -> None:
        """Keep the parts that the checkpoint restored from names: they come first in this
        subtask's output, then what it writes from now on. ``state``: one
        :meth:`snapshot_state` result, a list of them (several subtasks restored into this one,
        in subtask order), or None.

        Raises:
            CheckpointError: the state is not a ``sink_to_file``'s, its sink wrote another
                file, or a part it names is gone or changed.
        """
        states = [] if state is None else list(state) if isinstance(state, list) else [state]
        restored = [part for old in states if old is not None for part in self._restored_parts(old)]
        self._sealed = restored + self._sealed

    def close(self) -> None:
        """Remove the part not sealed yet (its records are replayed after a failure)."""
        if self._file is not None:
            self._close_part()
            _remove_file(self._part)
        if self._remote:  # nobody else can clean up on this machine
            for directory in reversed(self._made):
                try:
                    os.rmdir(directory)  # only when empty: never anything of someone else's
                except OSError:
                    pass

    def _open_part(self) -> None:
        # a new file with a random name, 0600, never through a symlink (see _file_parts)
        fd, self._part = create_part(self.target, self._index, self._attempt)
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    def _seal(self) -> None:
        """Close the current part; unless empty, it is sealed (from a machine of its own,
        its bytes are kept instead of the file)."""
        self._close_part()
        size = os.path.getsize(self._part)
        if not size:
            _remove_file(self._part)
        elif self._remote:
            self._sealed.append(TargetPart(self._part, size, Path(self._part).read_bytes()))
            _remove_file(self._part)
        else:
            self._sealed.append(TargetPart(seal_part(self._part), size))

    def _close_part(self) -> None:
        file, self._file = self._file, None
        assert file is not None
        file.flush()
        os.fsync(file.fileno())
        file.close()

    def _restored_parts(self, old: Any) -> list[TargetPart]:
        if not (isinstance(old, dict) and isinstance(old.get("target"), str) and isinstance(old.get("parts"), list)
                and all(isinstance(p, TargetPart) for p in old["parts"])):
            raise CheckpointError(f"the restored state of sink_to_file({self.target!r}) is not a sink_to_file's: "
                                  f"{old!r:.200}; was the sink of this job changed since the checkpoint?",
                                  path=self.target)
        if old["target"] != self.target:
            raise CheckpointError(f"the restored checkpoint's sink_to_file wrote this file, but this job's writes "
                                  f"{self.target}; restore a checkpoint of this job, or give sink_to_file the "
                                  "file of the job that wrote the checkpoint", path=old["target"])
        parts: list[TargetPart] = old["parts"]
        if not self._remote:  # the JobManager reads them where this subtask sees them
            for part in parts:
                _check_sealed(part, self.target)
        return parts

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

    def unresumable(self) -> None:
        """No checkpoint of the job can name its sealed parts: :meth:`close_job` removes them."""
        self._resumable = False

    def close_job(self, committed: bool) -> None:
        """Remove the unsealed parts left next to the target (of attempts that failed, or of
        a job that published nothing), and after a success the sealed ones too (no checkpoint
        of a finished job is kept), then give the lock back."""
        hold, self._hold = self._hold, None
        if hold is None:
            return
        try:
            remove_parts(self.target, sealed=committed or not self._resumable)
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


def _check_sealed(part: TargetPart, target: str) -> None:
    """A restored part must still be the regular file of this user its subtask sealed.

    Raises:
        CheckpointError: it is gone or changed.
    """
    if part.data is not None:
        return
    try:
        st = os.stat(part.path, follow_symlinks=False)
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror})"
    else:
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_size == part.size:
            return
        problem = f"is not the regular file of {part.size} bytes of this user that was sealed"
    raise CheckpointError(
        f"a part file of sink_to_file({target!r}) that the restored checkpoint names {problem}: the records "
        "written up to the checkpoint are in it. A run that wrote that file successfully since removes "
        "them; restore a checkpoint taken since, or run the job from the start", path=part.path)


def _remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
