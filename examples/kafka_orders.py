"""Stop a Kafka job with Ctrl-C and resume it with ``accelflow run -s``: every order once.

An unbounded job reads the topic ``orders`` from a Kafka broker, upper-cases each order and
writes it to part files under ``--out`` (a FileSink: each checkpoint publishes its parts).
With ``--produce N`` the script also writes N orders to the topic while the job runs
(``order-<n>``, numbered after those already there, ``--rate`` a second), so there is
something to read. Try it with the test broker (docs/kafka.md, "Stop and resume a Kafka
job")::

    accelflow kafka-broker --topic orders              # another terminal; prints 127.0.0.1:PORT
    accelflow run -D execution.checkpointing.dir=ckpts \\
        -D execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION \\
        examples/kafka_orders.py --bootstrap-servers 127.0.0.1:PORT --produce 1000
    # Ctrl-C: it prints "resume with: accelflow run -s ckpts/<job>/chk-<n> ..."; run that line

The resumed job goes on from the offsets of that checkpoint: ``cat orders-out/part-*`` then
holds each order of the topic exactly once (``sort | uniq -d`` prints nothing).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from accelflow import Environment
from accelflow.connectors.files import FileSink
from accelflow.connectors.kafka import KafkaSource


def produce(bootstrap: str, topic: str, count: int, rate: float) -> None:
    """``count`` orders, numbered after the topic's records, ``rate`` a second (0: at once)."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    source = KafkaSource(bootstrap, topic, group_id="orders-producer", bounded=True)
    first = sum(p.stop_offset or 0 for split in source.create_splits(1) for p in split.positions)
    started = time.perf_counter()
    for i in range(count):
        if rate:
            time.sleep(max(0.0, started + i / rate - time.perf_counter()))
        producer.produce(topic, f"order-{first + i}".encode())
        producer.poll(0)
    left = producer.flush(30)
    print(f"produced orders {first}..{first + count - 1}" + (f" ({left} undelivered)" if left else ""), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True, help="e.g. the address accelflow kafka-broker prints")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--out", default="orders-out", help="directory of the part files")
    parser.add_argument("--produce", type=int, default=0, metavar="N", help="also write N orders to the topic")
    parser.add_argument("--rate", type=float, default=100.0, help="orders a second --produce writes (0: at once)")
    args = parser.parse_args(argv)
    if args.produce < 0 or args.rate < 0:
        parser.error("--produce and --rate must be >= 0")

    env = Environment()
    if not env.config.is_set("execution.checkpointing.interval"):
        env.enable_checkpointing(1000)
    source = KafkaSource(args.bootstrap_servers, args.topic, group_id="orders-job", value_deserializer=bytes.decode)
    (env.from_source(source, name="orders")  # operators named: a checkpoint's state finds them
        .map(str.upper, name="upper")
        .sink_to(FileSink(args.out), name="files"))
    if args.produce:
        threading.Thread(target=produce, args=(args.bootstrap_servers, args.topic, args.produce, args.rate),
                         daemon=True).start()
    print(f"reading {args.topic} from {args.bootstrap_servers} into {args.out}/ (Ctrl-C stops)", flush=True)
    env.execute("orders")  # unbounded: runs until Ctrl-C
    return 0


if __name__ == "__main__":
    sys.exit(main())
