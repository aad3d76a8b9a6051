"""``param.coordination.lock-timeout`` and ``accelflow-gpu-discovery --lock-timeout`` (issue
16.5): how long discovery waits for the coordination lock, configured, checked and honoured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow import ConfigError, CoordinationError
from accelflow.resources.gpu import GPU_DISCOVERY_ENV_VAR, GPUDriver, GPUDriverConfig
from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S

from .conftest import FakeGPUs
from .test_coordination_lock import stopped_holder  # noqa: F401  (a fixture)
from .test_driver import COMMAND, make

MODULE = [sys.executable, "-m", "accelflow.resources.gpu._discovery_cli"]


def test_the_lock_timeout_defaults_to_the_coordination_default() -> None:
    assert make({}).config.lock_timeout == DEFAULT_LOCK_TIMEOUT_S
    assert make({"coordination.lock-timeout": "250 ms"}).config.lock_timeout == 0.25
    assert make({"coordination.lock-timeout": "30"}).config.lock_timeout == 30.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "positive"),
        ("-1 s", "expected a duration"),
        ("soon", "expected a duration"),
        ("1e999", "expected a duration"),
        ("2 h", "expected at most 3600 s"),
    ],
)
def test_a_bad_lock_timeout_names_the_key(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        make({"coordination.lock-timeout": value})
    assert info.value.keys == ("param.coordination.lock-timeout",)


def test_the_config_object_checks_its_lock_timeout() -> None:
    for bad in (0, -1.0, 1e9, float("nan"), True):
        with pytest.raises(ValueError, match="lock_timeout"):
            GPUDriverConfig(lock_timeout=bad)


def test_the_lock_timeout_is_for_in_process_discovery_only(tmp_path: Path) -> None:
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 0\n")
    script.chmod(0o755)
    with pytest.raises(ConfigError, match="--lock-timeout S] in param.discovery-script.args"):
        make({"discovery-script.path": str(script), "coordination.lock-timeout": "1 s"})
    with pytest.raises(ConfigError, match="conflicts with param.discovery-script.args") as info:
        make({"discovery-script.args": "--enable-coordination", "coordination.lock-timeout": "1"})
    assert info.value.keys == ("param.coordination.lock-timeout",)


def test_flink_style_args_may_set_the_lock_timeout_of_the_default_discovery() -> None:
    config = make({"discovery-script.args": "--enable-coordination --lock-timeout '500 ms'"}).config
    assert (config.coordination, config.lock_timeout) == (True, 0.5)
    with pytest.raises(ConfigError, match="--lock-timeout has no effect without"):
        make({"discovery-script.args": "--lock-timeout 1"})


def test_in_process_discovery_waits_only_the_configured_time(
    fake_gpus: FakeGPUs,
    coordination_file: Path,
    stopped_holder: subprocess.Popen[str],  # noqa: F811
) -> None:
    fake_gpus(2)
    driver = make(
        {"coordination-file": str(coordination_file), "coordination.lock-timeout": "200 ms"}
    )
    with pytest.raises(CoordinationError, match=r"still locked after 0\.2 s") as info:
        driver.retrieve_resource_info(1)
    assert f"pid {stopped_holder.pid} (" in str(info.value)


def test_the_command_waits_only_the_given_time(
    fake_gpus: FakeGPUs,
    coordination_file: Path,
    stopped_holder: subprocess.Popen[str],  # noqa: F811
) -> None:
    fake_gpus(2)
    done = subprocess.run(
        [*MODULE, "1", "--enable-coordination", "--coordination-file", str(coordination_file),
         "--lock-timeout", "0.2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, GPU_DISCOVERY_ENV_VAR: "nvidia-smi"},
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert "still locked after 0.2 s" in done.stderr and f"pid {stopped_holder.pid}" in done.stderr


@pytest.mark.parametrize(
    ("value", "message"), [("0", "positive"), ("7200", "at most 3600 s"), ("x", "a duration")]
)
def test_a_bad_command_lock_timeout_is_a_usage_error(value: str, message: str) -> None:
    done = subprocess.run(
        [*MODULE, "1", "--enable-coordination", "--lock-timeout", value],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2 and "argument --lock-timeout" in done.stderr
    assert message in done.stderr


def test_a_script_driver_releases_through_the_commands_lock_timeout(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(2)
    args = f"--enable-coordination --coordination-file {coordination_file} --lock-timeout 3"
    driver: GPUDriver = make({"discovery-script.path": COMMAND, "discovery-script.args": args})
    driver.retrieve_resource_info(1)
    assert driver._ledger is not None and driver._ledger.lock_timeout == 3.0
    driver.close()
