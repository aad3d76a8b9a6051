"""The real-time main job end to end: `accelflow run examples/fashion_mnist_streaming.py` as a
real subprocess: the embedded Kafka broker, the unbounded job with checkpoints, exactly-once
predictions read back, on the CPU and on fake GPUs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.testing import install_fake_nvidia_smi

pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
needs_data = pytest.mark.skipif(
    not DATA.exists() and not os.environ.get("ACCELFLOW_DATA_DIR"),
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)
pytestmark = [needs_data, pytest.mark.slow]


def run_streaming(*args: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelflow", "run", "--no-progress", *options,
         "examples/fashion_mnist_streaming.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )


def figures(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^([a-z][a-z _-]*[a-z]): (.*)$", stdout, re.M))


def test_the_stream_is_classified_exactly_once_with_the_batch_jobs_accuracy() -> None:
    proc = run_streaming("--limit", "3000", "--rate", "3000")
    assert proc.returncode == 0, proc.stderr
    out = figures(proc.stdout)
    assert out["images"].startswith("3000 through Kafka") and out["images"].endswith("0 duplicate(s)")
    assert float(out["accuracy"]) >= 0.80
    assert re.fullmatch(r"p50 [0-9.]+ ms, p99 [0-9.]+ ms", out["latency to sink"])
    assert "embedded test broker" in proc.stdout
    # the images are paced: what it measures is the offered rate, and it says so
    assert re.fullmatch(r"[0-9,]+ images/s offered \(--rate 3000 paces the input; .*--rate 0 measures its limit\) "
                        r"\(job [0-9.]+ s incl\. cluster start-up\)", out["throughput"]), out["throughput"]
    assert "rdkafka" not in proc.stderr  # no client outlives the embedded broker


def test_rate_0_offers_every_image_at_once_and_says_it_measures_the_jobs_limit() -> None:
    proc = run_streaming("--limit", "2000", "--rate", "0")
    assert proc.returncode == 0, proc.stderr
    out = figures(proc.stdout)
    assert out["images"].startswith("2000 through Kafka")
    assert re.fullmatch(r"[0-9,]+ images/s unpaced \(--rate 0: every image offered at once, so this is the most "
                        r"the job takes here\) \(job [0-9.]+ s incl\. cluster start-up\)", out["throughput"])


def test_on_fake_gpus_each_classifier_subtask_uses_its_own_device(tmp_path: Path) -> None:
    env = dict(os.environ)
    install_fake_nvidia_smi(tmp_path, 4, environ=env)  # the fake wins over a real GPU
    proc = run_streaming(
        "--limit", "2000", "--parallelism", "2",
        options=("--conf", "conf/two-taskexecutors.yaml",
                 "-D", f"external-resource.gpu.param.coordination-file={tmp_path / 'coordination.json'}"),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert float(figures(proc.stdout)["accuracy"]) >= 0.80
    assert len(re.findall(r"^\[classify \(\d/2\)\] ", proc.stdout, re.M)) == 2


def test_bad_options_name_the_option() -> None:
    proc = run_streaming("--batch-size", "0")
    assert proc.returncode != 0
    assert "--batch-size must be a positive integer" in proc.stderr
