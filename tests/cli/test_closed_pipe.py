"""Finding 14 (review 7): a command whose reader goes before its output ends (``accelflow
resources | head -1``) ends quietly with exit code 141 (128 + SIGPIPE, what the shell shows for
``ls`` or ``git`` there), never with a BrokenPipeError traceback. ``cluster status`` is tested
against a real session in test_cluster_status_health.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.testing import install_fake_nvidia_smi

GPU = ("-D", "external-resources=gpu", "-D", "external-resource.gpu.amount=2",
       "-D", "external-resource.gpu.driver-factory.class=gpu")


def _accelflow(tmp_path: Path, *args: str, stdout: int) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ACCELFLOW_GPU_DISCOVERY="nvidia-smi")
    for var in ("ACCELFLOW_CONF", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONUNBUFFERED"):
        env.pop(var, None)
    install_fake_nvidia_smi(tmp_path / "bin", 8, environ=env)
    return subprocess.run([str(Path(sys.executable).parent / "accelflow"), *args], env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120)


@pytest.mark.parametrize("args", [("resources", *GPU), ("resources", "--json", *GPU), ("--help",),
                                  ("cluster", "start", "--help")])
def test_a_closed_pipe_ends_the_command_quietly_with_141(tmp_path: Path, args: tuple[str, ...]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: `| head -0`
    try:
        out = _accelflow(tmp_path, *args, stdout=write)
    finally:
        os.close(write)
    assert (out.returncode, out.stderr) == (141, "")


def test_an_open_pipe_gets_everything(tmp_path: Path) -> None:
    out = _accelflow(tmp_path, "resources", "--json", *GPU, stdout=subprocess.PIPE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count('"uuid": "GPU-') == 2
