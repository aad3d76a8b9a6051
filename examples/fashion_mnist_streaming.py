"""Real-time Fashion-MNIST inference: Kafka in, a GPU operator, predictions to Kafka exactly once.

The Flink blog's "end-to-end real-time AI" job: the 10,000 test images enter a Kafka topic as
a stream (produced while the job runs), an unbounded job classifies them on the device each
classifier subtask was assigned, with latency-bounded micro-batching (a batch closes when
full or when its first image has waited ``--max-wait``), and writes the predictions to a
Kafka topic exactly once (Kafka transactions committed when a checkpoint completes). The
example reads the predictions back (``read_committed``) and prints accuracy, throughput and
end-to-end latency: from each image's Kafka timestamp to the sink, and to the moment a
reader could see the prediction. The images are offered at ``--rate`` images/s (2000 by
default), so the throughput it prints is that offered rate whenever the job keeps up; with
``--rate 0`` every image is offered at once and the throughput is the most this job takes
(its latency then includes the time images wait in Kafka).

Without ``--bootstrap-servers`` it starts the embedded test broker itself (librdkafka's mock
cluster, see docs/kafka.md), so it runs on a fresh machine::

    accelflow run examples/fashion_mnist_streaming.py
    accelflow run --conf conf/accelflow.yaml examples/fashion_mnist_streaming.py --rate 2000
    accelflow run examples/fashion_mnist_streaming.py --rate 0     # the job's own limit
    accelflow run examples/fashion_mnist_streaming.py --bootstrap-servers kafka:9092

Options (after the script): ``--bootstrap-servers``, ``--data-dir``, ``--limit``, ``--rate``
(images/s offered, 0 = as fast as the producer goes), ``--parallelism``, ``--gpu-amount``,
``--batch-size``, ``--max-wait`` (s), ``--checkpoint-interval`` (ms), ``--timeout`` (s).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import Environment, JobCancelledError
from accelflow.connectors.kafka import EmbeddedKafkaBroker, KafkaRecord, KafkaSink, KafkaSource
from accelflow.io import find_fashion_mnist, read_labeled_pair

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fashion_mnist_inference as inference  # noqa: E402
from fashion_mnist_model import DEFAULT_MODEL_PATH, NUM_PIXELS, load_model  # noqa: E402
from gpu_backend import array_module, to_numpy  # noqa: E402

_HEADER = 5  # an input message: index (uint32, big-endian), label (uint8), then 784 pixels


def decode(record: KafkaRecord) -> tuple[int, int, np.ndarray[Any, Any], int]:
    """An input message -> (Kafka timestamp in ms, image index, pixels, label): the source's
    ``deserializer``, as it needs the record's timestamp besides its value."""
    value = record.value
    if value is None or len(value) != _HEADER + NUM_PIXELS:
        raise ValueError(f"expected {_HEADER + NUM_PIXELS} bytes, got {0 if value is None else len(value)}")
    pixels = np.frombuffer(value, dtype=np.uint8, offset=_HEADER)
    return record.timestamp or 0, int.from_bytes(value[:4], "big"), pixels, value[4]


def encode(record: Any) -> bytes:
    """A prediction -> ``index,prediction,label,input timestamp ms,sink time ms`` (the sink
    serializes as it writes, so the last field is when the record reached the sink)."""
    timestamp, index, prediction, label = record
    return f"{int(index)},{int(prediction)},{int(label)},{int(timestamp)},{time.time() * 1000:.3f}".encode()


class Classify(inference.Classify):
    """The batch job's classifier (its device from the ``RuntimeContext``: CuPy, PyTorch or
    NumPy), preprocessing here and passing each image's timestamp and index through."""

    def map_batch(self, batch: Any) -> Any:
        timestamps, indexes, pixels, labels = batch  # device arrays with device="auto" on a GPU
        xp = array_module(pixels, self.xp)
        features = xp.asarray(self.model.preprocess(to_numpy(pixels)))  # as in training (NumPy)
        predictions = to_numpy(self.model.predict(features, xp=xp))
        return to_numpy(timestamps), to_numpy(indexes), predictions.astype(np.int64), to_numpy(labels)


def produce(bootstrap: str, topic: str, images: Any, labels: Any, rate: float,
            failed: list[BaseException]) -> None:
    """The stream: every test image, paced to ``rate`` images/s (0: unpaced)."""
    import confluent_kafka

    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
        started = time.perf_counter()
        for i in range(len(images)):
            if rate:
                ahead = started + i / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            value = i.to_bytes(4, "big") + bytes([int(labels[i])]) + images[i].tobytes()
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(60):
            raise RuntimeError("the producer could not deliver every image within 60 s")
    except BaseException as exc:  # reported by the main thread
        failed.append(exc)


def _wait_until_running(client: Any, timeout: float = 120.0) -> None:
    """Until every subtask runs (the embedded cluster), or the job is placed (a session)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.status() in ("FAILED", "CANCELED", "FINISHED"):
            client.wait(1)  # raises the job's error
        jobmanager = getattr(client, "jobmanager", None)
        if jobmanager is None:
            if client.status() == "RUNNING":
                return
        elif (subtasks := list(jobmanager.subtasks.values())) and all(s.state == "RUNNING" for s in subtasks):
            return
        time.sleep(0.01)
    raise TimeoutError(f"the job did not start within {timeout:g} s")


def read_predictions(bootstrap: str, topic: str, expected: int, timeout: float,
                     client: Any, tuning: dict[str, Any]) -> tuple[list[list[float]], int, float]:
    """Read committed predictions until every image has one; (rows, duplicates, last read)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False, **tuning,
    })
    # assigned, not subscribed: joining a consumer group takes seconds and would count as latency
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in partitions])
    rows: dict[int, list[float]] = {}
    duplicates, last_read = 0, time.time()
    deadline = time.monotonic() + timeout
    try:
        while len(rows) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(rows)} of {expected} predictions within {timeout:g} s")
            if client.status() in ("FAILED", "CANCELED", "FINISHED"):
                client.wait(1)  # raises the job's error
                raise RuntimeError(f"the job ended ({client.status()}) before every prediction")
            for message in consumer.consume(1000, 0.2):
                if message.error():
                    continue
                now = time.time() * 1000
                fields = [float(f) for f in message.value().decode().split(",")]
                index = int(fields[0])
                if index in rows:
                    duplicates += 1
                rows[index] = [*fields, now]
                last_read = now / 1000
    finally:
        consumer.close()
    return list(rows.values()), duplicates, last_read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="Kafka to use (default: start the embedded test broker)")
    parser.add_argument("--data-dir", help="directory of the Fashion-MNIST test files")
    parser.add_argument("--limit", type=int, help="stream only the first N test images")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="images/s offered: the throughput printed when the job keeps up "
                        "(0: every image at once, to measure the job's own limit)")
    parser.add_argument("--parallelism", type=int, default=1, help="classifier subtasks")
    parser.add_argument("--gpu-amount", default="1", help="GPU share per classifier subtask")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-wait", type=float, default=0.005, help="s a batch's first image may wait")
    parser.add_argument("--checkpoint-interval", type=int, default=500, help="ms between checkpoints")
    parser.add_argument("--timeout", type=float, default=300.0, help="s to wait for every prediction")
    parser.add_argument("--model", default=str(DEFAULT_MODEL_PATH), help="weights (.npz)")
    args = parser.parse_args(argv)
    for name in ("limit", "parallelism", "batch_size", "checkpoint_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if args.rate < 0 or args.max_wait < 0 or args.timeout <= 0:
        parser.error("--rate and --max-wait must be >= 0 and --timeout > 0")

    files = find_fashion_mnist(args.data_dir, splits=("test",))
    images, labels = read_labeled_pair(*files.test, limit=args.limit)
    images = images.reshape(len(images), NUM_PIXELS)
    load_model(args.model)  # fail now, naming the file, rather than in every subtask
    run = uuid.uuid4().hex[:8]
    in_topic, out_topic = f"fashion-mnist-images-{run}", f"fashion-mnist-predictions-{run}"

    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            broker = stack.enter_context(EmbeddedKafkaBroker())
            bootstrap = broker.bootstrap_servers
            for topic in (in_topic, out_topic):
                broker.create_topic(topic, partitions=4)
            print(f"Kafka: the embedded test broker at {bootstrap}", flush=True)

        env = Environment()
        if not env.config.is_set("execution.checkpointing.interval"):
            env.enable_checkpointing(args.checkpoint_interval)
        resource = "gpu" if "gpu" in env.config.external_resources else None
        if resource is None:
            print("No GPU resource configured (external-resources has no 'gpu'): classifying on "
                  "the CPU. See README 'Use your own GPU'.", flush=True)
        # the embedded broker answers a fetch only when fetch.wait.max.ms (500 ms by default)
        # has passed, even when records are there (a real broker answers at once)
        tuning = {"fetch.wait.max.ms": 5} if args.bootstrap_servers is None else {}
        source = KafkaSource(bootstrap, in_topic, group_id=f"fashion-mnist-{run}",
                             starting_offsets="earliest", deserializer=decode,
                             properties=tuning)
        (env.from_source(source, name="images")
            .map_batches(Classify(args.model, resource), name="classify", batch_size=args.batch_size,
                         max_wait=args.max_wait, parallelism=args.parallelism,
                         resources={resource: args.gpu_amount} if resource else None,
                         device="auto" if resource else None)
            .sink_to(KafkaSink(bootstrap, out_topic, delivery_guarantee="exactly-once",
                               transactional_id_prefix=f"fashion-mnist-{run}", value_serializer=encode),
                     name="predictions"))

        started = time.time()
        client = env.execute_async("fashion-mnist-streaming")
        _wait_until_running(client)  # the stream starts with the job
        failed: list[BaseException] = []
        producer = threading.Thread(target=produce, args=(bootstrap, in_topic, images, labels,
                                                          args.rate, failed), daemon=True)
        producer.start()
        try:
            rows, duplicates, last_read = read_predictions(bootstrap, out_topic, len(images),
                                                           args.timeout, client, tuning)
        finally:
            client.cancel()  # an unbounded job ends when it is cancelled
            with contextlib.suppress(JobCancelledError):
                client.wait(60)
        producer.join(5)
        if failed:
            raise failed[0]

    table = np.asarray(rows)  # index, prediction, label, input ms, sink ms, read ms
    accuracy = float((table[:, 1] == table[:, 2]).mean())
    to_sink = table[:, 4] - table[:, 3]
    to_reader = table[:, 5] - table[:, 3]
    first_in = table[:, 3].min() / 1000
    print(f"images: {len(table)} through Kafka topic {in_topic} -> {out_topic}, "
          f"{duplicates} duplicate(s)")
    throughput = len(table) / max(table[:, 4].max() / 1000 - first_in, 1e-9)
    print(f"throughput: {throughput:,.0f} images/s {_what_throughput_is(args.rate)} "
          f"(job {last_read - started:.2f} s incl. cluster start-up)")
    print(f"latency to sink: p50 {np.percentile(to_sink, 50):.1f} ms, p99 {np.percentile(to_sink, 99):.1f} ms")
    print(f"latency to a read_committed reader: p50 {np.percentile(to_reader, 50):.0f} ms, "
          f"p99 {np.percentile(to_reader, 99):.0f} ms (exactly-once output appears at each checkpoint)")
    print(f"accuracy: {accuracy:.4f}")
    return 0 if duplicates == 0 else 1


def _what_throughput_is(rate: float) -> str:
    if rate:
        return (f"offered (--rate {rate:g} paces the input; the job keeps up when these match, "
                f"--rate 0 measures its limit)")
    return "unpaced (--rate 0: every image offered at once, so this is the most the job takes here)"


if __name__ == "__main__":
    sys.exit(main())
