"""Config that used to be accepted silently (issue 16, item 10): each attack is refused with a
ConfigError naming the key (or the file), and what starts processes is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelflow import ConfigError
from accelflow.cli._main import main
from accelflow.config import config_from, keys as k, parse_definitions, read_yaml
from accelflow.config._read import MAX_CONFIG_FILE_BYTES


def refused(**layers: Any) -> dict[str, str]:
    """Load ``layers`` (``config_from`` arguments) and return ``{key: message}`` of the error."""
    with pytest.raises(ConfigError) as info:
        config_from(**layers)
    return {p.key: p.message for p in info.value.problems}


# -- duplicate keys --------------------------------------------------------------------------


def test_a_key_set_twice_in_one_yaml_file_is_refused_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "taskmanager.numberOfTaskSlots: 2\n"
        "external-resources: gpu\n"
        "taskmanager.numberOfTaskSlots: 8\n"
    )
    with pytest.raises(ConfigError) as info:
        read_yaml(conf)
    (problem,) = info.value.problems
    assert problem.key == "taskmanager.numberOfTaskSlots"
    assert problem.source == str(conf)
    assert problem.message == "set twice, at lines 1 and 3; keep one"


def test_every_duplicate_in_a_file_is_reported_even_with_the_same_value(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text("a.b: 1\nc.d: x\na.b: 1\nc.d: y\nsel: {k: 1, k: 2}\n")
    with pytest.raises(ConfigError) as info:
        config_from(conf_file=conf)
    assert [(p.key, p.message) for p in info.value.problems if "twice" in p.message] == [
        ("a.b", "set twice, at lines 1 and 3; keep one"),
        ("c.d", "set twice, at lines 2 and 4; keep one"),
        ("k", "set twice on line 5; keep one"),
    ]


def test_a_duplicate_is_reported_with_every_other_problem_of_the_file_and_the_definitions(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "external-resources: gpu\n"
        "taskmanager.numberOfTaskSlots: 2\n"
        "external-resource.gpu.amount: 1.5\n"
        "taskmanager.numberOfTaskSlots: many\n"
        "rest.prot: 8081\n"
    )
    with pytest.raises(ConfigError) as info:
        config_from(conf_file=conf, definitions=["parallelism.default=0", "oops",
                                                 "rest.port=1", "rest.port=2"])
    src = f"(from {conf})"
    assert str(info.value).splitlines() == [
        "-D oops: expected -D key=value",
        f"external-resource.gpu.amount {src}: expected a positive integer, got 1.5 (float)",
        "parallelism.default (from -D): expected a positive integer up to 32768, got '0'",
        "rest.port (from -D): given twice with different values ('1' and '2'); give it once",
        f"rest.prot {src}: unknown key; did you mean 'rest.port'?",
        f"taskmanager.numberOfTaskSlots {src}: set twice, at lines 2 and 4; keep one",
        f"taskmanager.numberOfTaskSlots {src}: expected a positive integer up to 1024, got 'many'",
    ]


def test_a_definition_without_a_value_is_not_also_reported_as_the_key_it_meant_to_set() -> None:
    with pytest.raises(ConfigError) as info:
        config_from(definitions=["external-resources=gpu", "external-resource.gpu.amount",
                                 "rest.port=x"])
    assert [str(p) for p in info.value.problems] == [
        "-D external-resource.gpu.amount: expected -D key=value",
        "rest.port (from -D): expected an integer, got 'x'",
    ]  # not also "external-resource.gpu.amount: resource 'gpu' is listed but has no amount"


def test_the_cli_reports_a_duplicate_with_the_other_problems(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text("external-resources: gpu\nexternal-resource.gpu.amount: 1\n"
                    "external-resources: gpu;fpga\n")
    accelflow = Path(sys.executable).parent / "accelflow"
    result = subprocess.run(
        [str(accelflow), "resources", "--conf", str(conf), "-D", "taskmanager.numberOfTaskSlots=0"],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "accelflow: config error: 3 problems",
        "  external-resource.fpga.amount: resource 'fpga' is listed but has no amount",
        f"  external-resources (from {conf}): set twice, at lines 1 and 3; keep one",
        "  taskmanager.numberOfTaskSlots (from -D): expected a positive integer up to 1024, got '0'",
    ]


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "base: &base {k: '1', j: '2'}\n"
        "external-resource.gpu.kubernetes.node-selector:\n  <<: *base\n  k: '3'\n"
    )
    assert read_yaml(conf)["external-resource.gpu.kubernetes.node-selector"] == {"k": "3", "j": "2"}


def test_a_definition_repeated_with_another_value_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_definitions(["taskmanager.numberOfTaskSlots=2", "rest.port=0", "taskmanager.numberOfTaskSlots=4"])
    (problem,) = info.value.problems
    assert (problem.key, problem.source) == ("taskmanager.numberOfTaskSlots", "-D")
    assert problem.message == "given twice with different values ('2' and '4'); give it once"


def test_a_definition_repeated_with_the_same_value_is_allowed() -> None:
    assert parse_definitions(["rest.port=0", "rest.port = 0"]) == {"rest.port": "0"}


def test_the_cli_refuses_conflicting_definitions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resources", "-D", "external-resources=none", "-D", "external-resources=gpu"]) == 2
    err = capsys.readouterr().err
    assert "external-resources (from -D): given twice with different values" in err
    assert "Traceback" not in err


# -- files that are not config files -----------------------------------------------------------


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_without_reading_it(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    assert refused(conf_file=path) == {
        path: "cannot read config file: not a regular file (a directory, device or pipe); give a YAML file"
    }


def test_a_fifo_without_a_writer_is_refused_instead_of_waited_for(tmp_path: Path) -> None:
    fifo = tmp_path / "conf.yaml"
    os.mkfifo(fifo)
    assert list(refused(conf_file=fifo)) == [str(fifo)]


def test_a_file_over_the_size_limit_is_refused_naming_it(tmp_path: Path) -> None:
    conf = tmp_path / "huge.yaml"
    conf.write_text("# padding\n" * (MAX_CONFIG_FILE_BYTES // 10 + 1) + "rest.port: 0\n")
    assert refused(conf_file=conf) == {
        str(conf): "cannot read config file: larger than 1024 KiB; a config file holds flat keys only"
    }


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    conf = tmp_path / "big.yaml"
    line = "rest.port: 0\n"
    conf.write_text(line + "#" * (MAX_CONFIG_FILE_BYTES - len(line) - 1) + "\n")
    assert config_from(conf_file=conf).get(k.REST_PORT) == 0


def test_the_cli_refuses_dev_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resources", "--conf", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero" in err and "not a regular file" in err


# -- values that start processes or size containers ---------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("taskmanager.numberOfTaskSlots", 10**44, "expected a positive integer up to 1024 "
         "(each slot can run a subtask process), got 1000000"),
        ("taskmanager.numberOfTaskSlots", "1025", "up to 1024"),
        ("local.number-taskmanager", 100000, "expected a positive integer up to 256 "
         "(each TaskExecutor is a process), got 100000 (int)"),
        ("ray.number-taskmanager", 10**9, "up to 4096"),
        ("parallelism.default", 40000, "up to 32768"),
        ("pipeline.batch-size", 2**40, "up to 16777216"),
        ("ray.local.num-gpus", -1, "expected an integer from 0 to 4096, got -1"),
        ("ray.local.num-cpus", 10**44, "up to 1048576"),
        ("taskmanager.cpu.cores", "1e999", "expected a positive number up to 4096, got '1e999'"),
        ("taskmanager.cpu.cores", float("inf"), "expected a positive number"),
        ("taskmanager.cpu.cores", float("nan"), "expected a positive number"),
        ("taskmanager.memory.process.size", "-5Gi", "'-5Gi' must be positive"),
        ("taskmanager.memory.process.size", "0", "must be positive"),
        ("taskmanager.memory.process.size", "2Ei", "more than the 1Pi"),
        ("taskmanager.memory.process.size", "1e999", "more than the 1Pi"),
        ("taskmanager.memory.process.size", "lots", "not a Kubernetes quantity"),
        ("ray.local.resources", '{"fpga": NaN}', "'fpga': expected a finite number >= 0, got nan"),
        ("ray.local.resources", '{"fpga": -1}', "'fpga': expected a finite number >= 0, got -1"),
        ("ray.local.resources", '{"fpga": Infinity}', "expected a finite number >= 0, got inf"),
        ("ray.local.resources", {"fpga": "2"}, "'fpga': expected a number >= 0, got '2'"),
        ("ray.local.resources", {"fpga": True}, "expected a number >= 0, got True"),
        ("ray.local.resources", {"GPU": 1}, "'GPU' is set with ray.local.num-gpus"),
        ("taskmanager.registration.timeout", "99999999999 s", "at most one year"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_key(key: str, value: object, fragment: str) -> None:
    problems = refused(values={key: value})
    assert list(problems) == [key]
    assert fragment in problems[key]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("taskmanager.numberOfTaskSlots", "1024", 1024),
        ("local.number-taskmanager", 256, 256),
        ("ray.local.num-gpus", 0, 0),
        ("taskmanager.memory.process.size", "1.5Gi", "1.5Gi"),
        ("taskmanager.memory.process.size", "1Pi", "1Pi"),
        ("ray.local.resources", '{"fpga": 0, "tpu": 2.5}', {"fpga": 0.0, "tpu": 2.5}),
    ],
)
def test_values_at_the_bounds_are_accepted(key: str, value: object, expected: object) -> None:
    assert config_from(values={key: value}).get(key) == expected


def test_bounds_apply_to_yaml_files_too(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(
        "taskmanager.numberOfTaskSlots: 100000000000000000000000000000000000000000000\n"
        "local.number-taskmanager: 100000\n"
        "taskmanager.cpu.cores: 1e999\n"
        "taskmanager.memory.process.size: -5Gi\n"
        "ray.local.resources: {fpga: -1}\n"
        "ray.local.resources.bad: .nan\n"
    )
    problems = refused(conf_file=conf)
    assert sorted(problems) == [
        "local.number-taskmanager",
        "ray.local.resources",
        "ray.local.resources.bad",  # not a key at all
        "taskmanager.cpu.cores",
        "taskmanager.memory.process.size",
        "taskmanager.numberOfTaskSlots",
    ]


def test_the_documented_table_states_each_bound() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    for row in ("| `taskmanager.numberOfTaskSlots` | `1` | A positive integer up to 1024 |",
                "| `local.number-taskmanager` | `1` | A positive integer up to 256 |",
                "| `ray.number-taskmanager` | `1` | A positive integer up to 4096 |"):
        assert row in doc


def test_environment_from_yaml_reports_a_duplicate_with_every_other_problem(tmp_path: Path) -> None:
    """Issue 25.9, through the API: ``Environment.from_yaml`` says everything at once, as --conf does."""
    from accelflow import Environment

    conf = tmp_path / "job.yaml"
    conf.write_text("parallelism.default: 2\nparallelism.default: 3\ntaskmanager.numberOfTaskSlots: -1\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Environment.from_yaml(conf)
    keys = caught.value.keys
    assert "parallelism.default" in keys and "taskmanager.numberOfTaskSlots" in keys, str(caught.value)
