"""PyFlink's own DataStream examples, read from the apache-flink release on PyPI.

Flink's code is not copied into this repository: the first test that needs the examples
downloads the apache-flink wheel (about 3 MB, no dependencies: only its
``pyflink/examples/datastream`` files are read, nothing is installed or imported) and keeps
them in ``~/.cache/accelflow-tests/`` (``$XDG_CACHE_HOME``). A port changes only the import
lines (:func:`port`), so the tests also prove that porting takes nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: the release whose examples real PyFlink ran to write the ``.expected`` files
FLINK_VERSION = "2.3.0"
#: the one change a port makes, to every import line of PyFlink
PORT = re.compile(r"^from pyflink(\.\w+)* import", re.M)
_PREFIX = "pyflink/examples/datastream/"


def port(source: str) -> str:
    """``source`` with every ``from pyflink.<module> import`` made ``from accelflow import``."""
    return PORT.sub("from accelflow import", source)


def examples_dir() -> Path:
    """The ``datastream`` folder of PyFlink's examples, downloaded once per machine.

    Raises:
        RuntimeError: the wheel could not be downloaded (the package registry is unreachable).
    """
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "accelflow-tests"
    target = base / f"pyflink-{FLINK_VERSION}-examples"
    if (target / "basic_operations.py").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        # the examples are the same in every platform's wheel: ask for one by name, so that
        # pip neither builds the sdist nor cares what this machine is
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"apache-flink=={FLINK_VERSION}", "--no-deps",
             "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--python-version", "3.11",
             "--implementation", "cp", "--abi", "cp311", "--quiet", "--dest", tmp],
            capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("apache_flink-*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"cannot download apache-flink=={FLINK_VERSION} for PyFlink's examples "
                               f"(pip exited {done.returncode}): {done.stderr.strip()[-2000:]}")
        staging = Path(tmp) / "datastream"
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith(_PREFIX) and name.endswith(".py"):
                    out = staging / name[len(_PREFIX):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(wheel.read(name))
        try:
            staging.rename(target)  # atomic: a concurrent run finds it whole or not at all
        except OSError:
            if not (target / "basic_operations.py").is_file():
                raise
            shutil.rmtree(staging, ignore_errors=True)
    return target
