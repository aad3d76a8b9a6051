"""Finding 3 (review 7): a module lying in the directory ``accelflow`` is started from must not
shadow accelflow's dependencies in the cluster's processes. Every Python child accelflow starts
(the TaskExecutors' zygote, ``python -c``; warm subtask processes and device hosts, ``python
-m``) runs with ``-P``; the job script's own directory and the user's ``PYTHONPATH`` still
reach them.

Real CLI runs: the ``accelflow`` console script, in a directory holding a planted
``cloudpickle.py`` that records which process imported it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from accelflow.testing import install_fake_nvidia_smi

ACCELFLOW = Path(sys.executable).parent / "accelflow"

PLANTED = '''
import os, sys
with open(os.environ["PLANTED_LOG"], "a") as log:
    log.write(f"{os.getpid()} {' '.join(sys.argv)[:80]}\\n")
sys.modules.pop("cloudpickle", None)
here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if p not in ("", here) and os.path.abspath(p) != here]
import importlib
sys.modules["cloudpickle"] = importlib.import_module("cloudpickle")
'''

# a resident model (device hosts) after a plain map (warm processes, forked subtasks); the
# sibling module and the PYTHONPATH module are imported by name in those processes
JOB = '''
from accelflow import Environment
from sibling import shift          # next to this script
from userlib import scale          # on the user's PYTHONPATH

class Model:
    def open(self, ctx):  # in a device host
        import os, sys
        assert sys.flags.safe_path and os.getcwd() not in sys.path, ("device host", sys.path)
        self.scale = scale
    def map_batch(self, batch):
        return batch * self.scale(1)

env = Environment({
    "external-resources": "gpu", "external-resource.gpu.amount": 1,
    "external-resource.gpu.driver-factory.class": "gpu", "taskmanager.numberOfTaskSlots": 2,
})
out = env.from_sequence(0, 99, parallelism=2).map(shift, resources={"gpu": 0.5}, parallelism=2).map_batches(
    Model(), batch_size=16, resident=True, resources={"gpu": 0.5}, parallelism=2).execute_and_collect()
assert sorted(int(x) for x in out) == [(x + 1) * 10 for x in range(100)], sorted(out)[:5]
print("job OK")
'''

SIBLING = '''
import os, sys

def shift(x):  # in a subtask (a warm process or forked by its TaskExecutor's forkserver)
    assert sys.flags.safe_path and os.getcwd() not in sys.path, ("subtask", sys.path)
    return x + 1
'''


def _planted(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a run from ``tmp_path/plant`` (which holds the planted module), the
    job's ``PYTHONPATH`` entry ``lib`` and fake GPUs; and the job script ``jobs/job.py``."""
    plant, jobs, lib = tmp_path / "plant", tmp_path / "jobs", tmp_path / "lib"
    for folder in (plant, jobs, lib):
        folder.mkdir()
    (plant / "cloudpickle.py").write_text(PLANTED, encoding="utf-8")
    (jobs / "job.py").write_text(textwrap.dedent(JOB), encoding="utf-8")
    (jobs / "sibling.py").write_text(SIBLING, encoding="utf-8")
    (lib / "userlib.py").write_text("def scale(x):\n    return 10 * x\n", encoding="utf-8")
    env = dict(os.environ, PLANTED_LOG=str(tmp_path / "planted.log"), PYTHONPATH=str(lib),
               ACCELFLOW_STATE_DIR=str(tmp_path / "state"), ACCELFLOW_GPU_DISCOVERY="nvidia-smi")
    for var in ("ACCELFLOW_CONF", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        env.pop(var, None)
    install_fake_nvidia_smi(tmp_path / "bin", 2, environ=env)
    return env, jobs / "job.py"


def _accelflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The ``accelflow`` console script, run in the directory of the planted module."""
    return subprocess.run([str(ACCELFLOW), *args], cwd=Path(env["PLANTED_LOG"]).parent / "plant", env=env,
                          capture_output=True, text=True, timeout=300)


def _never_planted(env: dict[str, str]) -> None:
    log = Path(env["PLANTED_LOG"])
    assert not log.exists(), f"the planted module ran in: {log.read_text(encoding='utf-8')}"


def test_a_module_in_the_working_directory_is_never_imported_by_the_cluster(tmp_path: Path) -> None:
    env, job = _planted(tmp_path)
    done = _accelflow(env, "run", str(job))
    assert done.returncode == 0, done.stderr
    assert "job OK" in done.stdout
    _never_planted(env)


def test_a_session_cluster_started_there_never_imports_it_either(tmp_path: Path) -> None:
    env, job = _planted(tmp_path)
    started = _accelflow(env, "cluster", "start", "-D", "rest.port=0", "-D", "taskmanager.numberOfTaskSlots=4",
                         "-D", "external-resources=gpu", "-D", "external-resource.gpu.amount=2",
                         "-D", "external-resource.gpu.driver-factory.class=gpu")
    assert started.returncode == 0, started.stderr
    url = started.stdout.split("REST API and web UI: ")[1].split()[0]
    try:
        done = _accelflow(env, "run", "--cluster", url, str(job))
        assert done.returncode == 0, done.stderr  # the session imports the job's modules from PYTHONPATH
        assert "job OK" in done.stdout
    finally:
        assert _accelflow(env, "cluster", "stop", "--cluster", url).returncode == 0
    _never_planted(env)
