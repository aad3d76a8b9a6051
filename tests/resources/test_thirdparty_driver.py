"""A third-party driver, installed by pip as a real package with an entry point.

``tests/fixtures/thirdparty_driver`` is the package ``acme-fpga-driver``: one module written
against ``accelflow.resources`` alone and the entry point ``acme-fpga`` in the group
``accelflow.external_resources``. It is installed into a temporary directory and
``accelflow resources`` runs as a real subprocess with that directory on ``PYTHONPATH``,
loading the driver both by import path and by entry point name (the issue's "Done when").
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).parents[1] / "fixtures" / "thirdparty_driver"
ENTRY_POINT = "acme-fpga"
IMPORT_PATH = "acme_fpga_driver:AcmeFPGADriverFactory"
SERIALS = "AC-0017,AC-0042,AC-0099"


def _can_build_wheels_offline() -> bool:
    """setuptools builds wheels by itself from 70.1 on; older ones need the ``wheel`` package.
    Python 3.12 environments may have no setuptools at all."""
    try:
        setuptools_version = tuple(int(p) for p in version("setuptools").split(".")[:2])
    except PackageNotFoundError:
        return False
    return setuptools_version >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _install_by_hand(source: Path, target: Path) -> None:
    """What pip installs for this one-module package, for hosts that cannot build it offline
    (no setuptools, no package index): the module and its ``.dist-info`` with the entry point."""
    target.mkdir()
    shutil.copy(source / "acme_fpga_driver.py", target)
    info = target / "acme_fpga_driver-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-fpga-driver\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[accelflow.external_resources]\n{ENTRY_POINT} = {IMPORT_PATH}\n"
    )


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver package, installed by pip into a fresh directory (not into the venv)."""
    root = tmp_path_factory.mktemp("thirdparty")
    source = root / "src"  # pip builds in the source tree: keep the repository clean
    shutil.copytree(PACKAGE_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = root / "site"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target)]
    if _can_build_wheels_offline():
        command += ["--no-build-isolation", "--no-index"]
    # else: pip fetches a build backend that can build wheels from the package index
    done = subprocess.run(
        [*command, str(source)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0 and not _can_build_wheels_offline():
        shutil.rmtree(target, ignore_errors=True)  # no package index either: do what pip does
        _install_by_hand(source, target)
        return target
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "acme_fpga_driver.py").is_file()
    return target


def run_cli(site: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ACCELFLOW_CONF")}
    env["COLUMNS"] = "200"  # rich wraps at 80 columns when stdout is not a terminal
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "accelflow", "resources", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )


def fpga_config(driver: str, amount: int = 2) -> list[str]:
    return [
        "-D", "external-resources=fpga",
        "-D", f"external-resource.fpga.amount={amount}",
        "-D", f"external-resource.fpga.driver-factory.class={driver}",
        "-D", f"external-resource.fpga.param.serials={SERIALS}",
        "-D", "external-resource.fpga.param.model=VU9P",
        "-D", "external-resource.fpga.kubernetes.config-key=acme.com/fpga",
    ]


def test_the_driver_imports_only_the_public_sdk() -> None:
    tree = ast.parse((PACKAGE_DIR / "acme_fpga_driver.py").read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    accelflow_modules = {m for m in modules if m and m.split(".")[0] == "accelflow"}
    assert accelflow_modules == {"accelflow.resources"}


@pytest.mark.parametrize("driver", [IMPORT_PATH, "acme_fpga_driver.AcmeFPGADriverFactory", ENTRY_POINT])
def test_resources_json_shows_the_third_party_infos(site_dir: Path, driver: str) -> None:
    done = run_cli(site_dir, *fpga_config(driver), "--json")

    assert done.returncode == 0, done.stderr
    (fpga,) = json.loads(done.stdout)["resources"]
    assert fpga["status"] == "ok"
    assert fpga["driver"] == driver
    assert fpga["kubernetes_config_key"] == "acme.com/fpga"
    assert fpga["infos"] == [
        {"index": "0", "model": "VU9P", "serial": "AC-0017"},
        {"index": "1", "model": "VU9P", "serial": "AC-0042"},
    ]


@pytest.mark.parametrize("driver", [IMPORT_PATH, ENTRY_POINT])
def test_resources_table_shows_the_third_party_infos(
    site_dir: Path, tmp_path: Path, driver: str
) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "external-resources: fpga\n"
        "external-resource.fpga.amount: 2\n"
        f"external-resource.fpga.driver-factory.class: {driver}\n"
        f"external-resource.fpga.param.serials: '{SERIALS}'\n"
    )

    done = run_cli(site_dir, "--conf", str(conf))

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert any("fpga" in line and "amount 2" in line and driver in line and "ok" in line
               for line in lines), done.stdout
    for column in ("index", "model", "serial"):
        assert column in done.stdout
    assert "AC-0017" in done.stdout and "AC-0042" in done.stdout
    assert "AC-0099" not in done.stdout  # amount 2: the driver was asked for two cards
    assert "U250" in done.stdout  # the driver's default model: no param reached it


def test_drivers_lists_the_entry_point_with_its_distribution(site_dir: Path) -> None:
    table = run_cli(site_dir, "--drivers")
    as_json = run_cli(site_dir, "--drivers", "--json")

    assert table.returncode == 0 and as_json.returncode == 0, table.stderr + as_json.stderr
    row = next(line for line in table.stdout.splitlines() if ENTRY_POINT in line)
    assert IMPORT_PATH in row and "acme-fpga-driver 0.1.0" in row
    entries = {e["name"]: e for e in json.loads(as_json.stdout)}
    assert entries[ENTRY_POINT] == {
        "name": ENTRY_POINT,
        "value": IMPORT_PATH,
        "distribution": "acme-fpga-driver",
        "version": "0.1.0",
    }
    assert entries["gpu"]["distribution"] == "accelflow"  # built-in, registered the same way


def test_a_parameter_the_driver_rejects_is_named_by_its_full_key(site_dir: Path) -> None:
    done = run_cli(site_dir, *fpga_config(ENTRY_POINT), "-D", "external-resource.fpga.param.speed=9")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "accelflow: config error: external-resource.fpga.param.speed: unknown parameter(s) "
        "['speed']; Acme cards know ['model', 'serials']"
    ]


def test_a_discovery_failure_of_the_driver_fails_or_degrades(site_dir: Path) -> None:
    failed = run_cli(site_dir, *fpga_config(ENTRY_POINT, amount=4), "--json")
    degraded = run_cli(
        site_dir, *fpga_config(ENTRY_POINT, amount=4), "--json",
        "-D", "external-resource.fpga.on-discovery-failure=degrade",
    )

    assert failed.returncode == 1
    assert failed.stdout == "" and "Traceback" not in failed.stderr
    assert "only 3 Acme card(s) present, 4 wanted" in failed.stderr
    assert degraded.returncode == 0, degraded.stderr
    (fpga,) = json.loads(degraded.stdout)["resources"]
    assert fpga["status"] == "degraded" and fpga["infos"] == []
    assert "only 3 Acme card(s) present, 4 wanted" in fpga["message"]


def test_without_the_package_the_entry_point_name_is_unknown(site_dir: Path) -> None:
    done = run_cli(None, *fpga_config(ENTRY_POINT))

    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert "external-resource.fpga.driver-factory.class" in line
    assert "no driver named 'acme-fpga'" in line and "registered: gpu" in line


# -- issue 12.7: a Flink-style info class (no super().__init__()) through a real job ----------


def test_the_flink_style_infos_of_a_third_party_driver_reach_a_real_job(
    site_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Acme driver's ``AcmeCardInfo`` implements only ``get_property``/``get_keys`` and
    never calls ``super().__init__()``; the TaskExecutors (real processes) serialise it, the
    scheduler assigns it, the driver's ``isolation_env`` gets its own objects back (it reads
    their ``serial`` attribute) and each subtask sees its card."""
    from accelflow import Environment, RichMapFunction, RuntimeContext

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site_dir), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(site_dir))
    monkeypatch.delenv("ACME_VISIBLE_CARDS", raising=False)

    class Card(RichMapFunction[int, tuple[str, str, str]]):
        def open(self, ctx: RuntimeContext) -> None:
            (card,) = ctx.get_external_resource_infos("fpga")
            self.seen = (card.get_property("serial") or "", card.address, os.environ["ACME_VISIBLE_CARDS"])

        def map(self, value: int) -> tuple[str, str, str]:
            return self.seen

    env = Environment({
        "external-resources": "fpga",
        "external-resource.fpga.amount": 2,
        "external-resource.fpga.driver-factory.class": ENTRY_POINT,
        "external-resource.fpga.param.serials": SERIALS,
        "local.number-taskmanager": 1,
        "taskmanager.numberOfTaskSlots": 2,
    })
    records = (
        env.from_sequence(0, 3, parallelism=2)
        .map(Card, parallelism=2, resources={"fpga": 1})
        .execute_and_collect()
    )

    assert sorted(set(records)) == [("AC-0017", "0", "AC-0017"), ("AC-0042", "1", "AC-0042")]
