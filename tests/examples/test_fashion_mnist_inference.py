"""The main job end to end: `accelflow run examples/fashion_mnist_inference.py` as a real
subprocess on a slice of the real Fashion-MNIST test set (Debian's dataset-fashion-mnist)."""

from __future__ import annotations

import gzip
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accelflow.testing import install_fake_nvidia_smi

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
needs_data = pytest.mark.skipif(
    not DATA.exists() and not os.environ.get("ACCELFLOW_DATA_DIR"),
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)


def run_job(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelflow", "run", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


def accuracy(stdout: str) -> float:
    match = re.search(r"^accuracy: ([0-9.]+)$", stdout, re.M)
    assert match, stdout
    return float(match.group(1))


@needs_data
def test_cpu_run_ends_with_accuracy_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "predictions.csv"
    proc = run_job("examples/fashion_mnist_inference.py", "--limit", "2000",
                   "--parallelism", "2", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1].startswith("accuracy: ")
    assert accuracy(proc.stdout) >= 0.80
    assert "No GPU resource configured" in proc.stdout
    assert proc.stdout.count("NumPy on the CPU: no GPU resource configured") == 2
    lines = out.read_text().splitlines()
    assert len(lines) == 2000
    predicted, label, name = lines[0].split(",")
    assert 0 <= int(predicted) <= 9 and 0 <= int(label) <= 9 and name


@needs_data
def test_fake_gpus_each_subtask_uses_its_own_device(tmp_path: Path) -> None:
    """Two TaskExecutors x 2 fake GPUs, coordination on: 4 classifier subtasks get 4 distinct
    GPUs; a fake CuPy (NumPy underneath) proves the CUDA code path picks local device 0 under
    isolation."""
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    install_fake_nvidia_smi(tmp_path, 4, environ=env)  # the fake wins over a real GPU
    fake_cupy = tmp_path / "site" / "cupy"
    fake_cupy.mkdir(parents=True)
    (fake_cupy / "__init__.py").write_text(
        "import os\nfrom numpy import asarray, argmax\n"
        "class cuda:\n"
        "    class Device:\n"
        "        def __init__(self, i):\n"
        "            assert i == 0, i  # isolated: the subtask sees only its GPU\n"
        "            self.visible = os.environ['CUDA_VISIBLE_DEVICES']\n"
        "        def use(self):\n"
        "            pass\n"
    )
    proc = run_job(
        "--conf", "conf/two-taskexecutors.yaml",
        "-D", f"external-resource.gpu.param.coordination-file={tmp_path / 'coordination.json'}",
        "examples/fashion_mnist_inference.py", "--limit", "2000", "--parallelism", "4",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert accuracy(proc.stdout) >= 0.80
    assert proc.stdout.count("CuPy on gpu") == 4
    devices = re.findall(r"^  classify \((\d)/4\): (taskexecutor-\d) gpu (\d)$", proc.stdout, re.M)
    assert len(devices) == 4
    assert len({(te, gpu) for _, te, gpu in devices}) == 4


def test_missing_data_dir_says_how_to_get_the_files(tmp_path: Path) -> None:
    proc = run_job("examples/fashion_mnist_inference.py", "--data-dir", str(tmp_path))
    assert proc.returncode != 0
    assert "dataset-fashion-mnist" in proc.stderr
    assert "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]" in proc.stderr
    assert "train-images" not in proc.stderr  # inference never needs the training files
    assert "Traceback" not in proc.stderr


def _idx_gz(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes(), mtime=0)


def test_inference_runs_with_only_the_test_files(tmp_path: Path) -> None:
    """A data directory holding just t10k-images/labels (no 26 MB training files) suffices."""
    data = tmp_path / "fashion"
    data.mkdir()
    rng = np.random.default_rng(0)
    (data / "t10k-images-idx3-ubyte.gz").write_bytes(_idx_gz(rng.integers(0, 256, (40, 28, 28))))
    (data / "t10k-labels-idx1-ubyte.gz").write_bytes(_idx_gz(rng.integers(0, 10, 40)))
    out = tmp_path / "predictions.csv"

    proc = run_job("--no-progress", "examples/fashion_mnist_inference.py", "--data-dir", str(data),
                   "--parallelism", "1", "--output", str(out))

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1].startswith("accuracy: ")
    assert len(out.read_text().splitlines()) == 40
