"""``accelflow kafka-broker`` (issue 25, item 14): the embedded test broker as a command that
outlives job runs, so a Kafka job can be stopped with Ctrl-C and resumed with
``accelflow run -s``, as docs/kafka.md shows. Real processes and the real CLI throughout."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accelflow.connectors.kafka import KafkaSource
from kafka_cli import ACCELFLOW, ROOT, kafka_broker
from kafka_helpers import produce, read_all


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_it_serves_until_ctrl_c_and_exits_cleanly(stop: signal.Signals) -> None:
    with kafka_broker("--topic", "orders:3") as (broker, bootstrap):
        assert re.fullmatch(r"127\.0\.0\.1:\d+", bootstrap)
        produce(bootstrap, "orders", [b"apples", b"pears"])
        source = KafkaSource(bootstrap, "orders", group_id="g", bounded=True)
        (split,) = source.create_splits(1)
        assert [p.partition for p in split.positions] == [0, 1, 2]
        assert sorted(read_all(source, split)) == [b"apples", b"pears"]
        broker.send_signal(stop)
        out, err = broker.communicate(timeout=30)
    assert broker.returncode == 0, err
    assert out == ""  # the address was the only line on stdout
    assert err.splitlines() == [
        f"accelflow: Kafka test broker at {bootstrap}, topics orders (3 partitions). Records live in "
        "memory until it stops; Ctrl-C stops it",
        f"accelflow: Kafka test broker stopped ({stop.name})",
    ]


@pytest.mark.parametrize("args, message", [
    (["--topic", "orders:0"], "--topic: expected NAME or NAME:PARTITIONS"),
    (["--topic", ":4"], "--topic: expected NAME or NAME:PARTITIONS"),
    (["--brokers", "0"], "--brokers: expected a positive number of brokers, got 0"),
])
def test_bad_options_are_named(args: list[str], message: str) -> None:
    proc = subprocess.run([ACCELFLOW, "kafka-broker", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"accelflow: config error: {message}" in proc.stderr


def _orders(out: Path) -> list[str]:
    return [line for part in out.glob("part-*") for line in part.read_text(encoding="utf-8").splitlines()]


def _run_until(argv: list[str], cwd: Path, done: Callable[[], bool], what: str) -> str:
    """``accelflow ARGV`` until ``done()`` holds, then Ctrl-C; its stderr."""
    proc = subprocess.Popen([ACCELFLOW, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not done() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, f"{what} ended on its own: {proc.communicate()}"
        assert done(), f"{what}: not there within 120 s"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    return err


@pytest.mark.slow
def test_a_kafka_job_stopped_with_ctrl_c_resumes_with_s_exactly_once(tmp_path: Path) -> None:
    out = tmp_path / "orders-out"
    with kafka_broker("--topic", "orders:2") as (_, bootstrap):
        first = [ACCELFLOW, "run", "-D", "execution.checkpointing.dir=ckpts",
                 "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
                 "-D", "execution.checkpointing.interval=200 ms",
                 str(ROOT / "examples" / "kafka_orders.py"), "--bootstrap-servers", bootstrap,
                 "--produce", "300", "--rate", "500"]
        err = _run_until(first[1:], tmp_path, lambda: len(_orders(out)) >= 300, "the first run")
        resume = re.search(r"^accelflow: resume with: (.*)$", err, re.M)
        assert resume, err
        argv = shlex.split(resume.group(1))
        assert argv[:3] == ["accelflow", "run", "-s"] and argv[-2:] == ["--rate", "500"]
        # the same command line again: 300 more orders, numbered on, read from the checkpoint's offsets
        _run_until(argv[1:], tmp_path, lambda: len(_orders(out)) >= 600, "the resumed run")
        topic = KafkaSource(bootstrap, "orders", group_id="check", bounded=True)
        written = sum(p.stop_offset or 0 for split in topic.create_splits(1) for p in split.positions)
    assert written == 600
    assert sorted(_orders(out)) == sorted(f"ORDER-{i}" for i in range(600))
