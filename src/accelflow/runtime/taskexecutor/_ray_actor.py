"""The TaskExecutor as a Ray actor, and the relay that carries data channels through Ray.

Inside the actor the ordinary :class:`~accelflow.runtime.taskexecutor._taskexecutor.TaskExecutor` runs
unchanged in a thread; its "JobManager connection" is one end of an in-process pipe. Actor
calls stand in for the socket the local launcher uses:

* ``command(msg)``: a JobManager message (``deploy``, ``cancel``, ``shutdown``) into the pipe;
* ``poll(timeout)``: the TaskExecutor's messages (registration aside), read from the pipe and
  returned to the client, which puts them on the launcher's ``events`` queue.

Data channels (``relay:<name>`` addresses): a subtask listens on a Unix socket in the actor's
relay directory, and sends to the actor's relay socket, naming the channel first. The relay
forwards each chunk with an actor call ``deliver(name, sender, seq, chunk)`` to the actor that
hosts the receiving subtask (found in the routes the launcher broadcasts at deploy time); Ray
moves the chunk (large ones through its object store). The receiving actor restores the order
by sequence number and writes the chunks into the receiving subtask's socket. A delivery Ray
fails is reported at once as the sender's ``failed`` message (the sender may be blocked on
another channel), and the end of a stream is acknowledged to the sender only when every chunk
has arrived. A stream whose other end is gone is closed, as a direct connection would be: one
whose sender died or closed it to roll back in place (``abandon``), one whose receiving subtask
or actor died or rolled back (its chunks are dropped; its TaskExecutor or the launcher reports it). A channel whose
both ends live in one actor is delivered in process, without Ray. So nothing of ours crosses
machines: only Ray actor calls do; the Unix sockets stay inside one actor's machine.

NumPy source arrays (``SubtaskDescriptor.arrays``, Ray ``ObjectRef`` values put by the
JobManager) are fetched by the actor from its node's object store before the subtask is
forked (subtasks are no Ray workers), copied once per actor into an anonymous shared-memory
file the actor holds, and handed to the subtask as ``SharedArray`` locations. The actor frees
one when the last subtask deployed with it has exited (every forked subtask's exit is
reported, cancelled or not) and at :meth:`TaskExecutorActor.stop`.

This module imports Ray: only the Ray launcher imports it.
"""

from __future__ import annotations

import time

_IMPORT_STARTED = time.time()  # the start-up trace's "te imports started": before the rest

import collections
import functools
import itertools
import logging
import multiprocessing
import os
import queue
import re
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import msgspec.structs
import numpy  # noqa: F401  (before any chunk: see below)
import ray

from accelflow._errors import AccelflowError, JobError, TransportError, encode_error
from accelflow.config import config_from
from accelflow.config import keys as k
from accelflow.resources import ExternalResourceInfoProvider, ray_accelerator_env
from accelflow.runtime import close_listener, make_work_dir, serve_forever, unix_listener
from accelflow.runtime import (
    ByValue, ChannelDone, ChannelFailed, Collected, Command, Deploy, OpenChannel, Registration, RegistrationFailed,
    Shutdown, SubtaskExited, SubtaskFailed, SubtaskKey, TaskExecutorEvent,
)
from accelflow.runtime import CONNECT_TIMEOUT_S, RELAY_DIR_ENV_VAR, RELAY_SOCKET, send_pickled
from accelflow.runtime.taskexecutor import TaskExecutor, process_started, start_forkserver, trace
from accelflow.runtime.taskexecutor._warm import WarmSettings

log = logging.getLogger("accelflow.runtime")


def _receiver_died(exc: BaseException) -> bool:
    """Whether a ``deliver`` call failed because the receiving actor died (``ray.kill``, its
    node lost): that TaskExecutor is lost, not the sender, whose job rolls back in place. An
    actor that is only unreachable for now (``ActorUnavailableError``) may come back: its
    chunks are not dropped, the sender is failed as before."""
    return isinstance(exc, ray.exceptions.ActorDiedError)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# NumPy is imported with the actor, not by the first chunk that carries an array: Ray unpickles
# the arguments of concurrent ``deliver`` calls in several threads of the actor, and two of them
# importing NumPy at once fail one with "partially initialized module 'numpy._core.numeric'".

#: chunks a relay may have in flight to one receiver before it waits (backpressure)
RELAY_WINDOW = 8
_STOP_WAIT_S = 10.0


def _apply_environment(env: dict[str, str]) -> None:
    """Set accelflow's variables (``PYTHONHASHSEED``, ``PYTHONPATH``, the start-up trace) in
    this actor, for its forkserver and subtasks, and put the client's import path on
    ``sys.path`` (missing entries first, in order, as ``PYTHONPATH`` would)."""
    os.environ.update(env)
    missing = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = missing


def _keep_worker_main_from_subtasks() -> None:
    """Stop multiprocessing from running Ray's worker script (the actor's ``__main__``) again
    in every subtask: its spawn fix-up re-runs a ``__main__`` that has a ``__file__``, which
    imported Ray there (0.6 s per subtask). Subtasks need nothing of it: the job's functions
    travel by value (cloudpickle)."""
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None and hasattr(main, "__file__"):
        del main.__file__


@dataclass
class _Inbound:
    """One relayed channel sender as seen by the receiving actor. ``gone``: the stream broke
    (its sender or its receiving subtask went away, e.g. failed or rolled back into a new
    epoch): what still comes for it is dropped."""

    next_seq: int = 0
    pending: dict[int, Any] = field(default_factory=dict)
    conn: Connection | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    gone: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        """Close the connection to the receiving subtask (under ``lock``)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class TaskExecutorActor:
    """Body of the Ray actor; the launcher wraps it with ``ray.remote`` and resource options.

    Args:
        te_id: the TaskExecutor id, e.g. ``taskexecutor-1``.
        config_values: the job's config as raw key/values (``Configuration.to_raw_dict``).
        authkey: key of every Unix socket between this actor and its subtasks.
    """

    def __init__(self, te_id: str, config_values: dict[str, Any], authkey: bytes,
                 env: dict[str, str] | None = None) -> None:
        self.id = te_id
        self.config_values = config_values
        self.authkey = authkey
        _apply_environment(env or {})  # before the forkserver starts: it inherits both
        trace(f"te process created {te_id}", process_started())
        trace(f"te imports started {te_id}", _IMPORT_STARTED)
        trace(f"te imports done {te_id}")
        _keep_worker_main_from_subtasks()
        # the relay's sockets and every temporary file of the actor, its forkserver and subtasks;
        # removed by stop(), or by the next start on this host when the actor is killed
        self.relay_dir = str(make_work_dir(f"accelflow-ray-{te_id}-"))
        start_forkserver(workdir=self.relay_dir)  # in the main thread: it dies with the actor
        trace(f"te forkserver started {te_id}")
        self.jm, self.te_end = multiprocessing.Pipe()
        self.send_lock = threading.Lock()
        self.routes: dict[str, tuple[str, Any]] = {}
        self.routes_changed = threading.Condition()
        self.inbound: dict[tuple[str, str], _Inbound] = {}
        self.inbound_lock = threading.Lock()
        self.senders = itertools.count()
        self.relay_failures: queue.SimpleQueue[TaskExecutorEvent] = queue.SimpleQueue()
        self.arrays: dict[str, tuple[Any, int]] = {}  # array id -> (SharedArray, its memfd)
        self.array_users: dict[str, set[SubtaskKey]] = {}  # array id -> subtasks not exited
        self.arrays_lock = threading.Lock()
        self.serving: threading.Thread | None = None
        self.listener: Listener | None = None
        self.stopping = threading.Event()

    # -- life cycle ------------------------------------------------------------------------
    def ping(self) -> int:
        """The actor's pid; answers as soon as Ray has placed and started the actor."""
        return os.getpid()

    def start(self) -> Registration | RegistrationFailed:
        """Run the drivers and start serving: a ``Registration`` or a ``RegistrationFailed``."""
        config = config_from(values=self.config_values)
        try:
            os.environ.update(ray_accelerator_env(  # e.g. the GPU ids Ray chose for this actor
                config.external_resources.values(),
                ray.get_runtime_context().get_accelerator_ids(),
            ))
            warm = WarmSettings.from_config(config)
            provider = ExternalResourceInfoProvider.from_config(config)
        except AccelflowError as exc:
            return RegistrationFailed(self.id, encode_error(exc))
        trace(f"te drivers done {self.id}")
        te = TaskExecutor(self.id, self.te_end, provider, config.get(k.NUMBER_OF_TASK_SLOTS),
                          base_env={RELAY_DIR_ENV_VAR: self.relay_dir}, warm=warm,
                          heartbeat=(config.get(k.HEARTBEAT_INTERVAL), config.get(k.HEARTBEAT_TIMEOUT)))
        self.listener = unix_listener(os.path.join(self.relay_dir, RELAY_SOCKET))
        threading.Thread(target=serve_forever, daemon=True, name="accelflow-relay-accept",
                         args=(self.listener, self.authkey, self._relay, self.stopping.is_set,
                               "accelflow-relay")).start()
        self.serving = threading.Thread(target=self._serve, args=(te,), daemon=True,
                                        name="accelflow-taskexecutor")
        self.serving.start()
        return te.registration()

    @staticmethod
    def _serve(te: TaskExecutor) -> None:
        try:
            te.serve()
        finally:
            te.shutdown()

    def stop(self) -> None:
        """Stop every subtask, give the devices back and remove the relay directory."""
        if self.serving is not None:
            self.command(Shutdown())
            self.serving.join(_STOP_WAIT_S)
        if self.listener is not None:
            self.stopping.set()
            close_listener(self.listener)
        if self.relay_dir:
            shutil.rmtree(self.relay_dir, ignore_errors=True)
        with self.arrays_lock:
            for _, fd in self.arrays.values():
                os.close(fd)
            self.arrays.clear()
            self.array_users.clear()

    # -- JobManager messages ---------------------------------------------------------------
    def command(self, message: Command) -> None:
        """A JobManager message for the TaskExecutor (``deploy``, ``cancel``, ``shutdown``)."""
        if isinstance(message, Deploy) and message.descriptor.arrays:
            resolved = self._resolve_arrays(message)
            if resolved is None:
                return
            message = resolved
        with self.send_lock:
            self.jm.send(message)

    def poll(self, timeout: float) -> list[TaskExecutorEvent]:
        """The TaskExecutor's messages so far, waiting up to ``timeout`` s for the first."""
        out: list[TaskExecutorEvent] = []
        while not self.relay_failures.empty():
            out.append(self.relay_failures.get())
        if self.jm.poll(0 if out else timeout):
            while len(out) < 256 and self.jm.poll():
                out.append(self.jm.recv())
        for i, message in enumerate(out):
            if isinstance(message, SubtaskExited):
                self._arrays_unused_by(message.key)
            elif isinstance(message, Collected):  # Ray's own cloudpickle knows none of the client's classes
                out[i] = msgspec.structs.replace(message, chunk=ByValue(message.chunk))
        return out

    # -- NumPy source arrays from the object store -----------------------------------------
    def _resolve_arrays(self, message: Deploy) -> Deploy | None:
        """``message`` with its arrays mapped on this machine (``SharedArray`` locations), or
        None when one cannot be fetched: the subtask then fails and exits without starting."""
        desc = message.descriptor
        array_id = "?"
        try:
            locations = {}
            for array_id, ref in desc.arrays.items():
                locations[array_id] = self._map_array(array_id, ref, desc.key)
        except Exception as exc:
            self._arrays_unused_by(desc.key)
            why = _ANSI.sub("", str(exc)).strip().splitlines()
            self.relay_failures.put(SubtaskFailed(desc.key, encode_error(JobError(
                f"{self.id} could not fetch array {array_id} of its NumPy source from Ray's "
                f"object store: {type(exc).__name__}: {why[0] if why else ''}"))))
            self.relay_failures.put(SubtaskExited(desc.key, None))
            return None
        return Deploy(msgspec.structs.replace(desc, arrays=locations))

    def _map_array(self, array_id: str, ref: Any, key: SubtaskKey) -> Any:
        """The ``SharedArray`` of ``array_id`` for subtask ``key``: fetched (zero-copy, from
        this node's object store) and copied into this actor's shared memory once."""
        from accelflow.runtime import copy_to_memfd  # NumPy only where arrays come

        with self.arrays_lock:
            held = self.arrays.get(array_id)
            if held is None:
                array = ray.get(ref)
                held = copy_to_memfd(array, f"accelflow-array-{array_id[:16]}")
                del array
                self.arrays[array_id] = held
            self.array_users.setdefault(array_id, set()).add(key)
            return held[0]

    def _arrays_unused_by(self, key: SubtaskKey) -> None:
        """Subtask ``key`` has exited: free the arrays no other subtask here uses."""
        with self.arrays_lock:
            for array_id, users in list(self.array_users.items()):
                users.discard(key)
                if not users:
                    del self.array_users[array_id]
                    held = self.arrays.pop(array_id, None)
                    if held is not None:
                        os.close(held[1])

    # -- data channels ---------------------------------------------------------------------
    def add_route(self, name: str, te_id: str, actor: Any) -> None:
        """Channel ``name`` is received by a subtask of ``te_id`` (its actor handle)."""
        with self.routes_changed:
            self.routes[name] = (te_id, actor)
            self.routes_changed.notify_all()

    def deliver(self, name: str, sender: str, seq: int, chunk: Any) -> None:
        """Chunk ``seq`` of ``sender`` for channel ``name`` (``None`` ends that sender's stream).

        A receiving subtask that is gone (its socket broke: it failed, or rolled back into a
        new epoch, whose channels have new names) drops the stream here, quietly: its own
        TaskExecutor reports why, and the sender is rolled back or cancelled with the rest."""
        with self.inbound_lock:
            state = self.inbound.setdefault((name, sender), _Inbound())
        with state.lock:
            if state.gone.is_set():
                return
            state.pending[seq] = chunk
            try:
                while state.next_seq in state.pending:
                    item = state.pending.pop(state.next_seq)
                    state.next_seq += 1
                    if state.conn is None and not self._connect_receiver(name, state):
                        return  # abandoned while it waited for the receiver
                    assert state.conn is not None
                    send_pickled(state.conn.send, item)  # a job script's classes by value
                    if item is None:
                        state.close()
                        with self.inbound_lock:
                            del self.inbound[(name, sender)]
            except OSError:
                state.gone.set()
            if state.gone.is_set():
                state.pending.clear()
                state.close()

    def abandon(self, name: str, sender: str) -> None:
        """``sender``'s stream on channel ``name`` broke before its end (the sending subtask
        died, or closed it to roll back): close it towards the receiving subtask, which then
        sees it broken as on a direct connection, and drop what still comes for it."""
        with self.inbound_lock:
            state = self.inbound.setdefault((name, sender), _Inbound())
        state.gone.set()
        if state.lock.acquire(blocking=False):  # else the deliver holding it closes it
            try:
                state.pending.clear()
                state.close()
            finally:
                state.lock.release()

    def _connect_receiver(self, name: str, state: _Inbound) -> bool:
        """Connect ``state`` to the subtask listening for ``name`` here, waiting up to
        :data:`CONNECT_TIMEOUT_S` for it; False when the stream is abandoned meanwhile."""
        path = os.path.join(self.relay_dir, f"{name}.sock")
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while not state.gone.is_set():
            try:
                state.conn = Client(path, "AF_UNIX", authkey=self.authkey)
                return True
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise TransportError(f"downstream subtask at {path} never came up") from None
                time.sleep(0.01)
        return False

    def _route(self, name: str) -> tuple[str, Any]:
        with self.routes_changed:
            if not self.routes_changed.wait_for(lambda: name in self.routes, CONNECT_TIMEOUT_S):
                raise TransportError(f"no TaskExecutor receives channel {name!r}")
            return self.routes[name]

    def _report(self, sender_key: Any, name: str, te_id: str, exc: BaseException) -> str:
        """Fail the sending subtask's job now (its TaskExecutor's events) and say why; not when
        the receiving actor died (:func:`_receiver_died`): the launcher reports that
        TaskExecutor lost, and the sender, a survivor, rolls back in place."""
        cause = getattr(exc, "cause", None) or exc  # a RayTaskError wraps the receiver's error
        why = _ANSI.sub("", str(cause)).strip().splitlines()
        text = f"relaying to {te_id} failed: {type(cause).__name__}: {why[0] if why else ''}"
        if _receiver_died(exc):
            log.info("%s: data channel %s: %s (its chunks are dropped until the rollback)", self.id, name, text)
            return text
        log.warning("%s: data channel %s: %s", self.id, name, text)
        if sender_key is not None:
            self.relay_failures.put(SubtaskFailed(
                sender_key, encode_error(TransportError(f"data channel {name}: {text}"))))
        return text

    def _relay(self, conn: Connection) -> None:
        """Forward one subtask's chunks for one channel to the receiving actor, in order;
        answer the stream's end with ``ChannelDone`` once all arrived, or ``ChannelFailed``.
        A stream that breaks before its end (the sender died, or closed it to roll back) is
        abandoned at the receiving actor."""
        te_id, sender_key, name = "?", None, "?"
        abandon: Callable[[], Any] | None = None
        try:
            opened: OpenChannel = conn.recv()
            name, sender_key = opened.name, opened.sender
            te_id, actor = self._route(name)
            sender = f"{self.id}/{next(self.senders)}"
            send: Callable[[int, Any], Any]
            if te_id == self.id:
                abandon = functools.partial(self.abandon, name, sender)

                def send(seq: int, chunk: Any) -> None:
                    self.deliver(name, sender, seq, chunk)
            else:
                abandon = functools.partial(actor.abandon.remote, name, sender)
                send = self._sender(actor, name, sender, lambda exc: self._report(sender_key, name, te_id, exc))
            for seq in itertools.count():
                chunk = conn.recv()
                send(seq, chunk)
                if chunk is None:
                    abandon = None  # ended: nothing to abandon
                    conn.send(ChannelDone())
                    return
        except (EOFError, OSError):
            if abandon is not None:  # the sending subtask reports why, or rolls back
                abandon()
        except Exception as exc:  # Ray could not deliver: tell the sender, which then fails
            text = self._report(sender_key, name, te_id, exc)
            try:
                if _receiver_died(exc):  # as for a receiving subtask that is gone: drop, wait
                    while True:  # for the sender to close the stream (its rollback)
                        conn.recv()
                conn.send(ChannelFailed(text))
            except (EOFError, OSError):
                pass
        finally:
            conn.close()

    @staticmethod
    def _sender(actor: Any, name: str, sender: str, report: Callable[[BaseException], Any]) -> Callable[[int, Any], None]:
        """Send chunks to ``actor`` by ``deliver`` calls, at most :data:`RELAY_WINDOW` in
        flight; the end of the stream (``None``) waits for all. A failed call is reported at
        once, not at the next window check: the sender may be blocked on another channel whose
        receiver waits for this one (a deadlock otherwise)."""
        in_flight: collections.deque[Any] = collections.deque()
        reported = threading.Event()

        def on_done(future: Any) -> None:
            exc = future.exception()
            if exc is not None and not reported.is_set():
                reported.set()
                report(exc)

        def send(seq: int, chunk: Any) -> None:
            ref = actor.deliver.remote(name, sender, seq, chunk)
            ref.future().add_done_callback(on_done)
            in_flight.append(ref)
            if len(in_flight) >= RELAY_WINDOW or chunk is None:
                ray.get(list(in_flight) if chunk is None else in_flight.popleft())
                if chunk is None:
                    in_flight.clear()
        return send
