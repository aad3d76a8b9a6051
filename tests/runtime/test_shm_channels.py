"""Array batches through a channel's shared-memory ring (``accelflow.runtime.subtask._shm``),
between real processes over a real Unix socket: order, backpressure, and what a killed end
leaves behind."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelflow._errors import RingError, TransportError
from accelflow.dataflow import Columns
from accelflow.runtime.subtask._shm import ShmReceiver, ShmSender

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux")

KEY = b"test"
FORK = multiprocessing.get_context("fork")


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _rings_held() -> list[str]:
    """This process's descriptors and mappings of channel rings."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return [x for x in fds + maps.read().splitlines() if "accelflow-channel" in x]


@pytest.fixture
def address(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "channel.sock")


def _pair(listener: Listener, address: str) -> tuple[Connection, Connection]:
    """A connected (client, accepted) pair in this process (the handshake needs both ends)."""
    accepted: list[Connection] = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()))
    thread.start()
    client = Client(address, "AF_UNIX", authkey=KEY)
    thread.join()
    return client, accepted[0]


def _batches() -> list[Any]:
    rng = np.random.default_rng(0)
    out: list[Any] = []
    for i in range(60):
        rows = int(rng.integers(100, 3000))
        if i % 5 == 0:
            out.append([("record", i)] * 3)  # Python records: the pickled path
        elif i % 5 == 1:
            out.append(Columns((np.full((rows, 784), i, np.uint8), np.arange(rows, dtype=np.int64))))
        elif i % 5 == 2:
            out.append(np.full((rows, 2 * 784), i, np.float32)[:, ::2])  # strided
        else:
            out.append(np.full((rows, 784), i % 256, np.uint8))
    return out


def _send_all(address: str, ring_bytes: int) -> None:
    sender = ShmSender(Client(address, "AF_UNIX", authkey=KEY), ring_bytes=ring_bytes)
    for batch in _batches():
        sender.send(batch)
    sender.send(None)
    sender.close()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Columns):
        return isinstance(b, Columns) and all(np.array_equal(x, y) for x, y in zip(a.columns(), b.columns()))
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype == b.dtype and np.array_equal(a, b)
    return bool(a == b)


def test_batches_arrive_whole_and_in_order_through_a_small_ring(address: str) -> None:
    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        producer = FORK.Process(target=_send_all, args=(address, 4 * 1024 * 1024))
        producer.start()
        conn = listener.accept()
        receiver = ShmReceiver()
        got = []
        while (chunk := receiver.recv(conn)) is not None:
            got.append(chunk)
        producer.join()
    assert producer.exitcode == 0
    expected = _batches()
    assert len(got) == len(expected) and all(_same(e, g) for e, g in zip(expected, got))
    assert receiver.rings == {}  # the ring is unmapped at the end of the stream


def test_a_slow_consumer_bounds_the_ring_and_blocks_the_sender(address: str) -> None:
    batch = np.ones((256 * 1024,), np.uint8)
    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        client, conn = _pair(listener, address)
        sender = ShmSender(client, ring_bytes=1024 * 1024)
        sent: list[int] = []

        def produce() -> None:
            for i in range(20):
                sender.send(batch * (i % 7))
                sent.append(i)
            sender.send(None)

        thread = threading.Thread(target=produce)
        thread.start()
        assert sender.waiting.wait(30)  # the ring is full and nobody reads
        assert len(sent) == 4 and sender.in_flight_bytes <= 1024 * 1024
        receiver = ShmReceiver()
        got = []
        while (chunk := receiver.recv(conn)) is not None:
            got.append(chunk)
        thread.join()
        sender.close()
        conn.close()
    assert [int(c[0]) for c in got] == [i % 7 for i in range(20)]


def _receive_then_die(address: str, after: int) -> None:
    conn = Client(address, "AF_UNIX", authkey=KEY)
    receiver = ShmReceiver()
    for _ in range(after):
        receiver.recv(conn)
    conn.recv()  # the next batch's announcement, never acknowledged
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_consumer_killed_mid_batch_leaks_no_shared_memory(address: str) -> None:
    shm_before = _shm()
    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        consumer = FORK.Process(target=_receive_then_die, args=(address, 3))
        consumer.start()
        sender = ShmSender(listener.accept(), ring_bytes=1024 * 1024)
        with pytest.raises(TransportError, match="closed its data channel"):
            for _ in range(100):  # blocks on credits, then finds the consumer gone
                sender.send(np.ones((200_000,), np.uint8))
        assert _rings_held() != []  # (the check below can see a ring)
        consumer.join()
        sender.close()
    assert consumer.exitcode == -signal.SIGKILL
    assert _shm() == shm_before and _rings_held() == []  # no segment, descriptor or mapping


def _write_half_then_die(address: str) -> None:
    sender = ShmSender(Client(address, "AF_UNIX", authkey=KEY))
    sender.send(np.full((300_000,), 1, np.uint8))  # one whole batch first
    write = sender._write

    def torn(offset: int, array: np.ndarray[Any, Any]) -> None:
        write(offset, array[: len(array) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    sender._write = torn  # type: ignore[method-assign]
    sender.send(np.full((300_000,), 2, np.uint8))


def test_a_producer_killed_mid_write_never_delivers_a_torn_batch(address: str) -> None:
    shm_before = _shm()
    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        producer = FORK.Process(target=_write_half_then_die, args=(address,))
        producer.start()
        conn: Connection = listener.accept()
        receiver = ShmReceiver()
        first = receiver.recv(conn)
        assert first.shape == (300_000,) and (first == 1).all()
        with pytest.raises(EOFError):
            receiver.recv(conn)  # the socket closes: no second batch, torn or not
        producer.join()
        receiver.close_all()
        conn.close()
    assert producer.exitcode == -signal.SIGKILL and _shm() == shm_before


def test_small_and_object_batches_keep_the_pickled_path(address: str) -> None:
    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        client, conn = _pair(listener, address)
        sender = ShmSender(client)
        sender.send(np.arange(10))
        sender.send(np.array([{"a": 1}, None], dtype=object))
        receiver = ShmReceiver()
        assert list(receiver.recv(conn)) == list(range(10))
        assert list(receiver.recv(conn)) == [{"a": 1}, None]
        assert sender.ring is None and receiver.rings == {}
        sender.close()
        conn.close()


def test_a_rebalanced_array_job_goes_through_the_rings_and_matches_numpy() -> None:
    from accelflow import Environment

    images = np.random.default_rng(1).integers(0, 256, size=(20_000, 784), dtype=np.uint8)
    env = Environment({"taskmanager.numberOfTaskSlots": 3})
    out = (env.from_collection(images, parallelism=1)
           .map_batches(lambda b: b.astype(np.int64).sum(axis=1), parallelism=2)
           .execute_and_collect())
    assert sorted(out) == sorted(images.astype(np.int64).sum(axis=1).tolist())


@pytest.mark.parametrize("call", ["memfd_create", "ftruncate"])
def test_a_ring_that_cannot_be_made_is_a_clear_transport_error(
        address: str, monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    # out of descriptors (EMFILE) or memory: the sender says so, naming the ring and the fix;
    # not a raw OSError, and not a ChannelClosed (which blames a neighbour): a RingError
    import errno

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        client, accepted = _pair(listener, address)
        sender = ShmSender(client)
        monkeypatch.setattr(os, call, refuse)
        with pytest.raises(TransportError) as caught:
            sender.send(np.zeros((4096, 784), np.uint8))
        monkeypatch.undo()
        client.close()
        accepted.close()
    assert type(caught.value) is RingError
    assert "cannot make the shared-memory ring of a data channel" in str(caught.value)
    assert "Too many open files" in str(caught.value) and "ulimit -n" in str(caught.value)
    assert _rings_held() == []




_RECEIVER_WITHOUT_DESCRIPTORS = """
import sys
from multiprocessing.connection import Client
from accelflow.runtime.subtask._shm import ShmReceiver
from fd_limits import no_descriptor_left
conn = Client(sys.argv[1], "AF_UNIX", authkey=b"test")
no_descriptor_left()
try:
    ShmReceiver().recv(conn)
except BaseException as exc:
    print(type(exc).__name__, exc)
"""


def test_a_ring_the_receiver_cannot_take_is_a_clear_ring_error(address: str) -> None:
    # the receiving process has no descriptor left (its open-file limit, for real, as
    # `ulimit -n`): it says so, naming the ring and the fix (before: a raw OSError, which a
    # receiver reads as its sender gone)
    import subprocess
    import sys

    with Listener(address, "AF_UNIX", authkey=KEY) as listener:
        receiver = subprocess.Popen([sys.executable, "-c", _RECEIVER_WITHOUT_DESCRIPTORS, address],
                                    stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                        filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))})
        conn = listener.accept()
        sender = ShmSender(conn)
        try:
            sender.send(np.zeros((4096, 784), np.uint8))
        except TransportError:
            pass  # the receiver went away before its credit
        said, _ = receiver.communicate(timeout=60)
        sender.close()
        conn.close()
    assert said.startswith("RingError cannot take the shared-memory ring of a data channel"), said
    assert "Too many open files" in said and "ulimit -n" in said, said
