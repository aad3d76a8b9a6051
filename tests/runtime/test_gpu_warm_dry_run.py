"""``benchmarks/gpu_warm.py`` (the warm-device figures of ``benchmarks/gpu_inference.py``) run
through on this machine: a NumPy model on a fake GPU, the same session cluster, jobs and
SIGKILLs as on a real GPU. The GPU run happens only when a GPU machine is lent, so a broken
step there costs device time; this test finds it first (it once missed the session cluster's
start and failed at its first session job on an H200)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def test_the_warm_figures_run_through_without_a_gpu(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.delenv("ACCELFLOW_STATE_DIR", raising=False)
    from gpu_warm import HostModel, warm_figures

    images = np.random.default_rng(0).integers(0, 256, (60_000, 28, 28), dtype=np.uint8)
    expected = HostModel().map_batch(images)
    args = argparse.Namespace(parallelism=[1], repeat=1, batch_size=4096, prefetch=2)
    warm_figures(images, expected, 1.0, args, model=HostModel(), device=None, fake_gpu=True)
    out = capsys.readouterr().out
    for resident in ("False", "True"):
        for job in ("first", "second"):
            assert re.search(rf"session, resident={resident}, {job} job: first output \d+\.\d+ s", out), out
        for how in ("full restart", "in place from the start"):
            assert re.search(rf"session, resident={resident}: a subtask SIGKILLed, {how}: a replacement's "
                             r"output after \d+\.\d+ s", out), out
