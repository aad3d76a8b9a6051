"""``accelflow kafka-broker [--brokers N] [--topic NAME[:PARTITIONS] ...]``: the embedded test
broker (librdkafka's mock cluster, as :class:`~accelflow.connectors.kafka.EmbeddedKafkaBroker`
starts) in the foreground, until Ctrl-C, so that it outlives job runs: run a Kafka job with
checkpoints, stop it, and resume it with ``accelflow run -s`` against the same records.

It prints the bootstrap address alone on stdout (a script can start it in the background with
stdout to a file and read the first line), what it serves on stderr, and on Ctrl-C (SIGINT) or
SIGTERM stops the cluster and exits 0.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from accelflow._errors import ConfigError
from accelflow.cli._common import say

_DESCRIPTION = """\
Run a Kafka broker for tests and examples (librdkafka's mock cluster, as EmbeddedKafkaBroker
starts) until Ctrl-C. It prints its bootstrap address on stdout. It listens on a loopback
port that librdkafka picks, keeps records in memory only (about the last 5 MiB of each
partition), and creates a topic used before it exists with 4 partitions. Not for production:
see docs/kafka.md for what it does not do (read_committed, fencing)."""

_EPILOG = """\
examples:
  accelflow kafka-broker
  accelflow kafka-broker --topic orders:8 --topic scores"""


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "kafka-broker", help="run a Kafka broker for tests and examples until Ctrl-C",
        description=_DESCRIPTION, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--brokers", type=int, default=1, metavar="N", help="brokers in the cluster (default 1)")
    parser.add_argument("--topic", dest="topics", action="append", default=[], metavar="NAME[:PARTITIONS]",
                        help="create this topic at start (default 4 partitions); repeatable")
    parser.set_defaults(func=kafka_broker)


def kafka_broker(args: argparse.Namespace) -> int:
    from accelflow.connectors.kafka import AUTO_CREATED_PARTITIONS, MockKafkaCluster

    if args.brokers < 1:
        raise ConfigError(f"expected a positive number of brokers, got {args.brokers}", key="--brokers")
    topics = [_topic(spec, AUTO_CREATED_PARTITIONS) for spec in args.topics]
    # librdkafka's threads inherit this mask: SIGINT and SIGTERM reach only the sigwait below
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    cluster = MockKafkaCluster(args.brokers)
    try:
        for name, partitions in topics:
            cluster.create_topic(name, partitions)
        print(cluster.bootstrap_servers, flush=True)
        made = "; ".join(f"{name} ({partitions} partitions)" for name, partitions in topics)
        say(f"Kafka test broker at {cluster.bootstrap_servers}" + (f", topics {made}" if made else "")
            + ". Records live in memory until it stops; Ctrl-C stops it")
        got = signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.close()
    say(f"Kafka test broker stopped ({signal.Signals(got).name})")
    return 0


def _topic(spec: str, default_partitions: int) -> tuple[str, int]:
    name, _, partitions = spec.partition(":")
    if not name or any(c.isspace() for c in name) or (partitions and not (partitions.isdigit() and int(partitions))):
        raise ConfigError(f"expected NAME or NAME:PARTITIONS (a positive number), e.g. orders:8; got {spec!r}",
                          key="--topic")
    return name, int(partitions) if partitions else default_partitions
