"""An embedded Kafka broker for tests and examples: librdkafka's mock cluster, held by a
separate OS process (``python -m`` this module) that other processes reach over TCP.

The holder creates the cluster through librdkafka's public mock API (``rdkafka_mock.h``,
exported by the library ``confluent_kafka`` ships), prints ``BOOTSTRAP host:port[,...]`` and
then serves one command a line on stdin (``create <topic> <partitions>``). It exits when its
stdin closes, so it dies with the process that started it (and on Linux also through
``PR_SET_PDEATHSIG``). See docs/kafka.md for what the mock cluster does and does not do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import select
import subprocess
import sys
import tempfile
from types import TracebackType
from typing import IO, Any

from accelflow._parent import die_with_parent, expected_parent, parent_env, python_command
from accelflow.connectors.kafka._common import KafkaConnectorError, kafka

#: partitions of a topic the mock cluster creates on first use (librdkafka's default)
AUTO_CREATED_PARTITIONS = 4
DEFAULT_STARTUP_TIMEOUT_S = 30.0


class EmbeddedKafkaBroker:
    """A throw-away Kafka cluster in a child process (librdkafka's mock cluster); the same
    broker in a terminal, living across job runs: ``accelflow kafka-broker``.

    Example:
        >>> from accelflow.connectors.kafka import KafkaSource
        >>> with EmbeddedKafkaBroker() as broker:
        ...     broker.create_topic("events", partitions=4)
        ...     source = KafkaSource(broker.bootstrap_servers, "events", group_id="g")
        ...     [len(split.positions) for split in source.create_splits(3)]
        [2, 1, 1]

    Topics also appear on first use with :data:`AUTO_CREATED_PARTITIONS` partitions.

    Args:
        num_brokers: brokers in the cluster (1 or 3 are typical).
        startup_timeout: seconds to wait for the holder's bootstrap address.
    """

    def __init__(self, num_brokers: int = 1, *, startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S) -> None:
        if isinstance(num_brokers, bool) or not isinstance(num_brokers, int) or num_brokers < 1:
            raise ValueError(f"num_brokers: expected a positive integer, got {num_brokers!r}")
        self.num_brokers = num_brokers
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._bootstrap: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port[,host:port...]`` of the running cluster."""
        if self._bootstrap is None:
            raise RuntimeError("EmbeddedKafkaBroker is not started: use it in a `with` block")
        return self._bootstrap

    @property
    def pid(self) -> int:
        """The process id of the holder process."""
        return self._running().pid

    def __enter__(self) -> EmbeddedKafkaBroker:
        kafka()  # a clear MissingDependencyError here rather than in the child
        self._stderr = tempfile.TemporaryFile("w+")
        self._proc = subprocess.Popen(
            python_command("-m", __name__, str(self.num_brokers)), env=dict(os.environ, **parent_env()),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
        )
        try:
            line = self._reply(self.startup_timeout, "start")
            if not line.startswith("BOOTSTRAP "):
                raise self._failed(f"unexpected first line {line!r}")
            self._bootstrap = line.split(" ", 1)[1]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_topic(self, name: str, partitions: int = AUTO_CREATED_PARTITIONS) -> None:
        """Create topic ``name`` with ``partitions`` partitions (replication: 1)."""
        _check_topic(name, partitions)
        proc = self._running()
        assert proc.stdin is not None
        proc.stdin.write(f"create {name} {partitions}\n")
        proc.stdin.flush()
        line = self._reply(self.startup_timeout, f"create_topic({name!r})")
        if line != "OK":
            raise KafkaConnectorError(f"the embedded broker cannot create topic {name!r}: {line.removeprefix('ERROR ')}",
                                      bootstrap_servers=self.bootstrap_servers, topic=name)

    def close(self) -> None:
        """Stop the holder process (idempotent)."""
        proc, self._proc, self._bootstrap = self._proc, None, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:  # the holder already died: nothing to tell it
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _running(self) -> subprocess.Popen[str]:
        if self._proc is None:
            raise RuntimeError("EmbeddedKafkaBroker is not started: use it in a `with` block")
        return self._proc

    def _reply(self, timeout: float, what: str) -> str:
        proc = self._running()
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            raise self._failed(f"no answer to {what} within {timeout:g} s")
        line = proc.stdout.readline()
        if not line:
            raise self._failed(f"the holder exited (code {proc.poll()}) during {what}")
        return line.strip()

    def _failed(self, why: str) -> KafkaConnectorError:
        err = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read()[-2000:].strip()
        return KafkaConnectorError(f"embedded Kafka broker: {why}" + (f"\n{err}" if err else ""),
                                   bootstrap_servers=self._bootstrap or "(not started)")


def _check_topic(name: str, partitions: int) -> None:
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"topic name: expected a non-empty name without spaces, got {name!r}")
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions: expected a positive integer, got {partitions!r}")


# -- the cluster, in the process that holds it ---------------------------------------------------


class MockKafkaCluster:
    """librdkafka's mock cluster, held by this process: what :class:`EmbeddedKafkaBroker`'s
    child process and ``accelflow kafka-broker`` run. It serves Kafka on loopback ports that
    librdkafka picks, keeps records in memory (about the last 5 MiB of each partition), and
    goes away with the process.

    Example:
        >>> cluster = MockKafkaCluster()
        >>> cluster.create_topic("orders", partitions=2)
        >>> cluster.bootstrap_servers.startswith("127.0.0.1:")
        True
        >>> cluster.close()

    Args:
        num_brokers: brokers in the cluster.
    """

    def __init__(self, num_brokers: int = 1) -> None:
        if isinstance(num_brokers, bool) or not isinstance(num_brokers, int) or num_brokers < 1:
            raise ValueError(f"num_brokers: expected a positive integer, got {num_brokers!r}")
        self._lib = lib = _librdkafka()
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # the handle only hosts the cluster: no bootstrap.servers, so it never connects anywhere
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self._handle = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0: RD_KAFKA_PRODUCER
        if not self._handle:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._cluster: Any = lib.rd_kafka_mock_cluster_new(self._handle, num_brokers)
        if not self._cluster:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        #: ``host:port[,host:port...]`` of the cluster's brokers
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int = AUTO_CREATED_PARTITIONS) -> None:
        """Create topic ``name`` (replication 1).

        Raises:
            ValueError: a bad name or partition count.
            KafkaConnectorError: the cluster refused (e.g. the topic exists).
        """
        _check_topic(name, partitions)
        if self._cluster is None:
            raise RuntimeError("the mock cluster is closed")
        rc = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        if rc != 0:
            raise KafkaConnectorError(f"cannot create topic {name!r}: {self._lib.rd_kafka_err2str(rc).decode()}",
                                      bootstrap_servers=self.bootstrap_servers, topic=name)

    def close(self) -> None:
        """Stop serving: the brokers' connections close, their records are gone (idempotent)."""
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            self._lib.rd_kafka_mock_cluster_destroy(cluster)
            self._lib.rd_kafka_destroy(self._handle)


def _librdkafka() -> Any:
    """The librdkafka that ``confluent_kafka`` uses (its wheel's copy, else the system's)."""
    package = os.path.dirname(kafka().__file__)
    found = sorted(glob.glob(os.path.join(package + ".libs", "librdkafka*"))
                   + glob.glob(os.path.join(package, ".dylibs", "librdkafka*")))
    path = found[0] if found else ctypes.util.find_library("rdkafka")
    if path is None:
        raise RuntimeError("cannot find librdkafka next to confluent_kafka nor on the system")
    lib = ctypes.CDLL(path)
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    for name, restype, argtypes in [
        ("rd_kafka_conf_new", vp, []),
        ("rd_kafka_conf_set", ctypes.c_int, [vp, cp, cp, cp, ctypes.c_size_t]),
        ("rd_kafka_new", vp, [ctypes.c_int, vp, cp, ctypes.c_size_t]),
        ("rd_kafka_mock_cluster_new", vp, [vp, ctypes.c_int]),
        ("rd_kafka_mock_cluster_bootstraps", cp, [vp]),
        ("rd_kafka_mock_topic_create", ctypes.c_int, [vp, cp, ctypes.c_int, ctypes.c_int]),
        ("rd_kafka_err2str", cp, [ctypes.c_int]),
        ("rd_kafka_mock_cluster_destroy", None, [vp]),
        ("rd_kafka_destroy", None, [vp]),
    ]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


# -- the holder process of EmbeddedKafkaBroker ---------------------------------------------------


def main(argv: list[str]) -> int:
    die_with_parent(parent=expected_parent())  # exits at once if the starting process is gone
    cluster = MockKafkaCluster(int(argv[0]) if argv else 1)
    print("BOOTSTRAP", cluster.bootstrap_servers, flush=True)
    for line in sys.stdin:  # EOF: the parent closed us (or died)
        parts = line.split()
        if len(parts) == 3 and parts[0] == "create" and parts[2].isdigit():
            try:
                cluster.create_topic(parts[1], int(parts[2]))
                print("OK", flush=True)
            except (ValueError, KafkaConnectorError) as e:
                print(f"ERROR {str(e).removeprefix(f'cannot create topic {parts[1]!r}: ')}", flush=True)
        else:
            print(f"ERROR unknown command {line.strip()!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
