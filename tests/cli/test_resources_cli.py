"""``accelflow resources``: exit codes, messages, the table and the ``--json`` shape.

The end-to-end cases run the real command in a subprocess; the many malformed configs of the
issue's "Done when" run through the same ``main()`` in-process to keep the suite fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.cli._main import main
from accelflow.testing import install_fake_nvidia_smi

STATIC = "accelflow.testing:StaticDriverFactory"
GOOD = [
    "-D", "external-resources=fpga",
    "-D", "external-resource.fpga.amount=2",
    "-D", f"external-resource.fpga.driver-factory.class={STATIC}",
    "-D", "external-resource.fpga.param.addresses=0,1",
    "-D", "external-resource.fpga.kubernetes.config-key=xilinx.com/fpga",
    "-D", "external-resource.fpga.yarn.config-key=yarn.io/fpga",
]


def overriding(args: tuple[str, ...]) -> list[str]:
    """``args`` with a later ``-D key=value`` replacing an earlier one of the same key (the CLI
    refuses a key given twice with different values), so tests can write ``*GOOD, -D ...``."""
    definitions: dict[str, str] = {}
    rest: list[str] = []
    items = iter(args)
    for arg in items:
        if arg == "-D":
            definition = next(items)
            definitions[definition.partition("=")[0]] = definition
        else:
            rest.append(arg)
    return [*(a for d in definitions.values() for a in ("-D", d)), *rest]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    base["COLUMNS"] = "200"  # rich wraps at 80 columns when stdout is not a terminal
    return subprocess.run(
        [sys.executable, "-m", "accelflow", "resources", *overriding(args)],
        capture_output=True, text=True, env={**base, **(env or {})}, timeout=60, check=False,
    )


def run_in_process(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, list[str], str]:
    """``main()`` as the console script calls it: exit code, stderr lines, stdout."""
    code = main(["resources", *overriding(args)])
    out, err = capsys.readouterr()
    return code, err.splitlines(), out


def defs(values: dict[str, str]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("-D", f"{key}={value}")]


# -- success ---------------------------------------------------------------------------------


def test_ok_prints_every_resource_with_its_infos_and_cluster_keys() -> None:
    done = run_cli(*GOOD, "-D", "external-resources=fpga;gpu", "-D", "external-resource.gpu.amount=1")

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    fpga = next(line for line in lines if line.startswith("fpga"))
    assert "amount 2" in fpga and STATIC in fpga and "status ok" in fpga
    assert "kubernetes xilinx.com/fpga" in fpga and "yarn yarn.io/fpga" in fpga
    gpu = next(line for line in lines if line.startswith("gpu"))
    assert "amount 1" in gpu and "driver -" in gpu and "status no-driver" in gpu
    cells = [line.strip("│ ") for line in lines if line.startswith("│")]
    assert cells == ["0", "1"]


def test_json_has_one_object_per_resource() -> None:
    done = run_cli(*GOOD, "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "resources": [
            {
                "name": "fpga",
                "amount": 2,
                "driver": STATIC,
                "status": "ok",
                "message": None,
                "warnings": [],
                "infos": [{"index": "0"}, {"index": "1"}],
                "kubernetes_config_key": "xilinx.com/fpga",
                "yarn_config_key": "yarn.io/fpga",
            }
        ]
    }


@pytest.mark.parametrize("value", ["none", "NONE"])
def test_none_means_no_resources(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, err, out = run_in_process(capsys, "-D", f"external-resources={value}")
    assert (code, err) == (0, [])
    assert "No external resources configured" in out

    code, err, out = run_in_process(capsys, "-D", f"external-resources={value}", "--json")
    assert (code, err, json.loads(out)) == (0, [], {"resources": []})


def test_keys_of_unlisted_resources_are_warned_about_not_rejected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err, out = run_in_process(
        capsys, *GOOD, "-D", "external-resource.gpu.amount=1", "--json"
    )

    assert code == 0
    assert err == [
        "accelflow: warning: external-resource.gpu.amount: resource 'gpu' is not listed in "
        "external-resources; ignored"
    ]
    assert [r["name"] for r in json.loads(out)["resources"]] == ["fpga"]


def test_a_drivers_warning_is_one_stderr_line_in_the_one_warning_format() -> None:
    done = run_cli(*GOOD, "-D", "external-resource.fpga.param.addresses=3,10,2")

    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("accelflow: warning: ") and "keeping the first 2 (2, 3)" in line
    assert "warning" not in done.stdout  # said once, on stderr, not again in the table


def test_uuids_are_never_cut_when_piped_to_a_narrow_width(tmp_path: Path) -> None:
    """stdout is a pipe and COLUMNS=40: every UUID (and the factory path) appears whole."""
    env = dict(os.environ, COLUMNS="40")
    install_fake_nvidia_smi(tmp_path / "bin", 2, environ=env)  # the fake wins over a real GPU
    args = ["-D", "external-resources=gpu", "-D", "external-resource.gpu.amount=1",
            "-D", "external-resource.gpu.driver-factory.class=gpu",
            "-D", f"external-resource.gpu.param.coordination-file={tmp_path / 'c.json'}"]

    as_json = run_cli(*args, "--json", env=env)
    table = run_cli(*args, env=env)

    assert as_json.returncode == 0 and table.returncode == 0, as_json.stderr + table.stderr
    (gpu,) = json.loads(as_json.stdout)["resources"]
    uuids = [info["uuid"] for info in gpu["infos"]]
    assert len(uuids) == 1 and len(uuids[0]) > 30  # a GPU-... UUID of the fake, on any host
    lines = table.stdout.splitlines()
    for uuid in uuids:
        assert any(uuid in line for line in lines), table.stdout
    assert "…" not in table.stdout
    assert any("driver gpu" in line for line in lines)


def test_more_devices_than_the_amount_are_trimmed_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, out = run_in_process(
        capsys, *GOOD, "-D", "external-resource.fpga.param.addresses=3,10,2", "--json"
    )

    assert code == 0
    (fpga,) = json.loads(out)["resources"]
    assert fpga["infos"] == [{"index": "2"}, {"index": "3"}]  # numeric order: 2, 3, 10
    (warning,) = fpga["warnings"]
    assert "returned 3 devices, keeping the first 2 (2, 3)" in warning


def test_driver_output_is_printed_literally_not_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, out = run_in_process(
        capsys, *GOOD, "-D", "external-resource.fpga.param.addresses=[/x],[bold]0"
    )

    assert code == 0
    assert "[/x]" in out and "[bold]0" in out


# -- config errors: exit 2, one line per problem, naming the key -----------------------------


def test_config_errors_exit_2_with_one_line_per_problem_and_no_traceback(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "external-resources: gpu;fpga;gpu\n"
        "external-resource.gpu.amount: 1.5\n"
        "external-resource.gpu.on-discovery-failure: ignore\n"
        "external-resource.fpga.kubernetes.config-key: fpga\n"
        "external-resource.gpu.amout: 2\n"
    )

    done = run_cli("--conf", str(conf), "-D", "external-resource.fpga.amount=0")

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "accelflow: config error: 6 problems",
        "  external-resource.fpga.amount (from -D): expected a positive integer, got '0'",
        f"  external-resource.fpga.kubernetes.config-key (from {conf}): expected "
        "'<vendor-domain>/<name>' such as 'nvidia.com/gpu', got 'fpga'",
        f"  external-resource.gpu.amount (from {conf}): expected a positive integer, got 1.5 (float)",
        f"  external-resource.gpu.amout (from {conf}): unknown key; "
        "did you mean 'external-resource.gpu.amount'?",
        f"  external-resource.gpu.on-discovery-failure (from {conf}): expected one of fail, "
        "degrade; got 'ignore'",
        f"  external-resources (from {conf}): 'gpu' is listed twice",
    ]


MALFORMED = {
    "empty name": ({"external-resources": ";gpu"}, "external-resources"),
    "trailing separator": ({"external-resources": "gpu;"}, "external-resources"),
    "empty value": ({"external-resources": ""}, "external-resources"),
    "duplicate name": ({"external-resources": "gpu;gpu"}, "external-resources"),
    "none as a name": ({"external-resources": "gpu;none"}, "external-resources"),
    "dot in name": ({"external-resources": "gpu.0"}, "external-resources"),
    "space in name": ({"external-resources": "my gpu"}, "external-resources"),
    "missing amount": ({"external-resources": "gpu;fpga"}, "external-resource.fpga.amount"),
    "zero amount": ({"external-resource.gpu.amount": "0"}, "external-resource.gpu.amount"),
    "negative amount": ({"external-resource.gpu.amount": "-1"}, "external-resource.gpu.amount"),
    "fractional amount": ({"external-resource.gpu.amount": "1.5"}, "external-resource.gpu.amount"),
    "non-numeric amount": ({"external-resource.gpu.amount": "two"}, "external-resource.gpu.amount"),
    "empty driver class": (
        {"external-resource.gpu.driver-factory.class": ""},
        "external-resource.gpu.driver-factory.class",
    ),
    "bad kubernetes key": (
        {"external-resource.gpu.kubernetes.config-key": "gpu"},
        "external-resource.gpu.kubernetes.config-key",
    ),
    "reserved kubernetes domain": (
        {"external-resource.gpu.kubernetes.config-key": "kubernetes.io/gpu"},
        "external-resource.gpu.kubernetes.config-key",
    ),
    "bad yarn key": (
        {"external-resource.gpu.yarn.config-key": "yarn.io/1gpu"},
        "external-resource.gpu.yarn.config-key",
    ),
    "duplicate kubernetes key": (
        {
            "external-resources": "gpu;gpu2",
            "external-resource.gpu2.amount": "1",
            "external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu",
            "external-resource.gpu2.kubernetes.config-key": "nvidia.com/gpu",
        },
        "external-resource.gpu2.kubernetes.config-key",
    ),
    "duplicate yarn key": (
        {
            "external-resources": "gpu;gpu2",
            "external-resource.gpu2.amount": "1",
            "external-resource.gpu.yarn.config-key": "yarn.io/gpu",
            "external-resource.gpu2.yarn.config-key": "yarn.io/gpu",
        },
        "external-resource.gpu2.yarn.config-key",
    ),
    "bad failure policy": (
        {"external-resource.gpu.on-discovery-failure": "retry"},
        "external-resource.gpu.on-discovery-failure",
    ),
    "unknown key": ({"external-resource.gpu.amout": "1"}, "external-resource.gpu.amout"),
    "unknown top-level key": ({"taskmanager.numberOfTaskSlot": "2"}, "taskmanager.numberOfTaskSlot"),
    "no setting": ({"external-resource.gpu": "1"}, "external-resource.gpu"),
    "bad -D": ({"-D": "external-resource.gpu.amount"}, "-D external-resource.gpu.amount"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_malformed_config_exits_2_with_a_line_naming_the_key(
    capsys: pytest.CaptureFixture[str], case: str
) -> None:
    values, key = MALFORMED[case]
    base = {"external-resources": "gpu", "external-resource.gpu.amount": "1"}
    args = defs({**base, **{k: v for k, v in values.items() if k != "-D"}})
    if "-D" in values:
        args += ["-D", values["-D"]]

    code, err, out = run_in_process(capsys, *args)

    assert code == 2
    assert out == ""
    assert len(err) == 1, err
    assert err[0].startswith(f"accelflow: config error: {key} (from -D): ") or err[0].startswith(
        f"accelflow: config error: {key}: "
    ), err


def test_a_missing_config_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    code, err, _ = run_in_process(capsys, "--conf", str(missing))

    assert code == 2
    assert err == [f"accelflow: config error: {missing}: cannot read config file: No such file or directory"]


def test_a_factory_that_rejects_its_params_exits_2_naming_the_full_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err, _ = run_in_process(capsys, *GOOD, "-D", "external-resource.fpga.param.addresses=,")

    assert code == 2
    assert err == [
        "accelflow: config error: external-resource.fpga.param.addresses: expected a "
        "comma-separated list such as '0,1'"
    ]


def test_an_unknown_driver_exits_non_zero_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = run_in_process(
        capsys, *GOOD, "-D", "external-resource.fpga.driver-factory.class=no_such_module:Factory"
    )

    assert code == 1  # DriverLoadError: not a ConfigError subclass
    assert err == [
        "accelflow: error: external-resource.fpga.driver-factory.class: cannot import module "
        "'no_such_module': ModuleNotFoundError: No module named 'no_such_module'"
    ]


# -- discovery failures: exit 1 under fail, 0 and "degraded" under degrade -------------------


def test_discovery_failure_under_fail_exits_1_without_traceback() -> None:
    done = run_cli(*GOOD, "-D", "external-resource.fpga.amount=3")

    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "accelflow: error: discovery of 'fpga' failed: found 2 device(s) ['0', '1'], but "
        "external-resource.fpga.amount is 3 (set external-resource.fpga.on-discovery-failure: "
        "degrade to start without it)"
    ]


def test_discovery_failure_under_degrade_exits_0_and_shows_it() -> None:
    args = [*GOOD, "-D", "external-resource.fpga.amount=3",
            "-D", "external-resource.fpga.on-discovery-failure=degrade"]

    table = run_cli(*args)
    as_json = run_cli(*args, "--json")

    assert table.returncode == 0 and as_json.returncode == 0
    assert "status degraded" in table.stdout
    assert "found 2 device(s) ['0', '1'], but external-resource.fpga.amount is 3" in table.stdout
    assert "│" not in table.stdout  # no info table: a degraded resource exposes no infos
    (fpga,) = json.loads(as_json.stdout)["resources"]
    assert fpga["status"] == "degraded" and fpga["infos"] == []
    assert fpga["message"].startswith("discovery of 'fpga' failed: found 2 device(s)")
    assert "on-discovery-failure: degrade" in as_json.stderr  # the TaskExecutor's log warning


# -- where the config comes from -------------------------------------------------------------


def test_accelflow_conf_is_the_default_file_and_conf_and_d_win(tmp_path: Path) -> None:
    env_file = tmp_path / "env.yaml"
    env_file.write_text("external-resources: fpga\nexternal-resource.fpga.amount: 1\n")
    conf_file = tmp_path / "conf.yaml"
    conf_file.write_text("external-resources: fpga\nexternal-resource.fpga.amount: 2\n")
    env = {"ACCELFLOW_CONF": str(env_file)}

    def amount(*args: str) -> int:
        done = run_cli(*args, "--json", env=env)
        assert done.returncode == 0, done.stderr
        return int(json.loads(done.stdout)["resources"][0]["amount"])

    assert amount() == 1
    assert amount("--conf", str(conf_file)) == 2
    assert amount("--conf", str(conf_file), "-D", "external-resource.fpga.amount=3") == 3


def test_drivers_lists_the_built_in_gpu_driver(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, out = run_in_process(capsys, "--drivers", "--json")

    assert (code, err) == (0, [])
    gpu = next(e for e in json.loads(out) if e["name"] == "gpu")
    assert gpu["value"] == "accelflow.resources.gpu:GPUDriverFactory"
    assert gpu["distribution"] == "accelflow"
