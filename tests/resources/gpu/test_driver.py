"""The GPU driver and its factory: parameters, both discovery modes, isolation env, release."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from accelflow import ConfigError, CoordinationError, DiscoveryError, ExternalResourceInfo
from accelflow.config import config_from
from accelflow.resources import ExternalResourceInfoProvider, load_driver_factory
from accelflow.resources.gpu import (
    GPU_DISCOVERY_ENV_VAR,
    CoordinationFile,
    GPUDriver,
    GPUDriverFactory,
)
from accelflow.testing._nvidia_smi import FakeGPU, fake_gpu_uuid

from .conftest import FakeGPUs
from .test_script import write_script

COMMAND = shutil.which("accelflow-gpu-discovery") or str(
    Path(sys.executable).parent / "accelflow-gpu-discovery"
)


def make(params: dict[str, str]) -> GPUDriver:
    return GPUDriverFactory().create_external_resource_driver(params)


def indexes(infos: object) -> list[str]:
    return [i["index"] for i in sorted(infos)]  # type: ignore[call-overload]


@pytest.fixture(autouse=True)
def _fake_gpus_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests mean the fake nvidia-smi, also in the discovery commands they start: never
    the real NVML of a GPU machine (issue 12.9)."""
    monkeypatch.setenv(GPU_DISCOVERY_ENV_VAR, "nvidia-smi")


@pytest.fixture
def two_gpu_script(tmp_path: Path) -> Path:
    """Flink's test script: prints 0..amount-1, fails on --exit-non-zero."""
    return write_script(
        tmp_path / "testing-gpu-discovery.sh",
        'if [ "$2" = "--exit-non-zero" ]; then echo boom >&2; exit 1; fi\nseq -s, 0 $(($1 - 1))',
    )


# -- the factory and its parameters ------------------------------------------------------------


def test_the_factory_is_the_gpu_entry_point_and_importable_by_path() -> None:
    by_name = load_driver_factory(
        "gpu", resource="gpu", key="external-resource.gpu.driver-factory.class"
    )
    by_path = load_driver_factory(
        "accelflow.resources.gpu:GPUDriverFactory", resource="gpu", key="k"
    )
    assert type(by_name) is type(by_path) is GPUDriverFactory


@pytest.mark.parametrize("blank", ["", " "])
def test_a_blank_script_path_names_the_key(blank: str) -> None:  # Flink case 15
    with pytest.raises(ConfigError) as info:
        make({"discovery-script.path": blank})
    assert info.value.keys == ("param.discovery-script.path",)
    assert "must not be empty" in str(info.value)


def test_a_missing_script_names_the_key_and_the_resolved_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # Flink case 16
    with pytest.raises(ConfigError) as info:
        make({"discovery-script.path": "invalid/path"})
    assert info.value.keys == ("param.discovery-script.path",)
    assert f"{tmp_path}/invalid/path does not exist" in str(info.value)
    assert "relative paths are resolved against the working directory" in str(info.value)


def test_a_non_executable_script_fails_at_construction(tmp_path: Path) -> None:
    script = write_script(tmp_path / "no-x.sh", "echo 0", mode=0o644)  # Flink case 17
    with pytest.raises(ConfigError, match="is not executable; run: chmod \\+x") as info:
        make({"discovery-script.path": str(script)})
    assert info.value.keys == ("param.discovery-script.path",)


def test_a_directory_is_not_a_script(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        make({"discovery-script.path": str(tmp_path)})


def test_relative_paths_resolve_against_accelflow_home_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_gpu_script: Path, fake_gpus: FakeGPUs
) -> None:
    fake_gpus(8)  # index 7 exists, whatever GPUs the host has
    home = tmp_path / "home"
    write_script(home / "plugins" / "gpu.sh", "echo 7")
    monkeypatch.setenv("ACCELFLOW_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    driver = make({"discovery-script.path": "plugins/gpu.sh"})
    assert (
        driver.config.script is not None
        and driver.config.script.path == home / "plugins" / "gpu.sh"
    )
    assert indexes(driver.retrieve_resource_info(1)) == ["7"]
    with pytest.raises(ConfigError, match=r"resolved against \$ACCELFLOW_HOME="):
        make({"discovery-script.path": f"./{two_gpu_script.name}"})  # in cwd, not in home


def test_relative_paths_resolve_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_gpu_script: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    driver = make({"discovery-script.path": f"./{two_gpu_script.name}"})
    assert driver.config.script is not None and driver.config.script.path == two_gpu_script


def test_a_bare_name_planted_in_the_working_directory_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gpus: FakeGPUs
) -> None:
    """Issue 16.8: a bare name is a command looked up on PATH only; a file of that name in the
    working directory (which anyone who can write there may plant) never runs."""
    fake_gpus(10)
    planted = write_script(tmp_path / "work" / "discover-gpus", "echo 9")
    monkeypatch.chdir(planted.parent)
    bin_dir = tmp_path / "commands"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f".{os.pathsep}{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ConfigError) as info:
        make({"discovery-script.path": "discover-gpus"})
    assert info.value.keys == ("param.discovery-script.path",)
    assert "no executable 'discover-gpus' on PATH" in str(info.value)
    assert "'./discover-gpus'" in str(info.value)  # the fix for a script meant in the cwd
    on_path = write_script(bin_dir / "discover-gpus", "echo 3")
    driver = make({"discovery-script.path": "discover-gpus"})
    assert driver.config.script is not None and driver.config.script.path == on_path
    assert indexes(driver.retrieve_resource_info(1)) == ["3"]  # not the planted '9'


def test_a_bare_command_name_is_found_on_path(
    fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpus(2)
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{Path(COMMAND).parent}")
    driver = make({"discovery-script.path": "accelflow-gpu-discovery"})
    assert (
        driver.config.script is not None
        and driver.config.script.path.name == "accelflow-gpu-discovery"
    )
    assert indexes(driver.retrieve_resource_info(2)) == ["0", "1"]


def test_unknown_and_invalid_parameters_are_all_reported(two_gpu_script: Path) -> None:
    with pytest.raises(ConfigError) as info:
        make(
            {
                "discovery-script.path": str(two_gpu_script),
                "discovery-script.timout": "5",
                "discovery-script.args": "--label 'unbalanced",
            }
        )
    assert set(info.value.keys) == {"param.discovery-script.timout", "param.discovery-script.args"}
    message = str(info.value)
    assert "did you mean param.discovery-script.timeout?" in message
    assert "cannot split" in message and "No closing quotation" in message


@pytest.mark.parametrize(
    ("params", "culprit", "message"),
    [
        (
            {"discovery-script.timeout": "soon"},
            "param.discovery-script.timeout",
            "expected a duration",
        ),
        (
            {"discovery-script.timeout": "0 s"},
            "param.discovery-script.timeout",
            "expected a positive",
        ),
        ({"coordination": "maybe"}, "param.coordination", "expected true or false"),
    ],
)
def test_bad_values_name_their_key(
    params: dict[str, str], culprit: str, message: str, two_gpu_script: Path
) -> None:
    if culprit.startswith("param.discovery-script"):
        params = {**params, "discovery-script.path": str(two_gpu_script)}
    with pytest.raises(ConfigError, match=message) as info:
        make(params)
    assert info.value.keys == (culprit,)


@pytest.mark.parametrize(
    ("params", "culprit", "message"),
    [
        (
            {"discovery-script.args": "--x"},
            "param.discovery-script.args",
            "'--x': unrecognized arguments: --x; without discovery-script.path only",
        ),
        (
            {"discovery-script.timeout": "5"},
            "param.discovery-script.timeout",
            "has no effect without",
        ),
        (
            {"coordination-file": "relative.json"},
            "param.coordination-file",
            "must be an absolute path",
        ),
        (
            {"coordination-file": "/tmp/x.json", "coordination": "false"},
            "param.coordination-file",
            "coordination is false",
        ),
    ],
)
def test_parameters_that_would_be_silently_ignored_are_errors(
    params: dict[str, str], culprit: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        make(params)
    assert info.value.keys == (culprit,)


# -- discovery-script.args without a script: Flink's default-script flags (issue 12.1) -------


@pytest.mark.parametrize(
    ("args", "coordination", "file"),
    [
        ("--enable-coordination", True, None),
        ("--enable-coordination-mode", True, None),
        ("--enable-coordination-mode --coordination-file /tmp/flink-gpus.json", True, "/tmp/flink-gpus.json"),
        ("--coordination-file '/tmp/a b.json' --enable-coordination", True, "/tmp/a b.json"),
        ("", False, None),  # Flink's default script coordinates only when asked
    ],
)
def test_args_without_a_script_configure_the_default_discovery(
    args: str, coordination: bool, file: str | None
) -> None:
    config = make({"discovery-script.args": args}).config
    assert config.script is None
    assert config.coordination is coordination
    assert config.coordination_file == (Path(file) if file else None)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ("--enable-coordination --gpus 4", "--gpus"),
        ("2", "2"),
        ("--owner-pid 17", "--owner-pid"),
        ("--coordination-file /tmp/g.json", "--coordination-file has no effect without"),
        ("--enable-coordination '", "No closing quotation"),
    ],
)
def test_other_args_without_a_script_are_errors_naming_them(args: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        make({"discovery-script.args": args})
    assert info.value.keys == ("param.discovery-script.args",)
    assert named in str(info.value)


@pytest.mark.parametrize("param", [{"coordination": "true"}, {"coordination-file": "/tmp/g.json"}])
def test_args_without_a_script_and_coordination_params_conflict(param: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="conflicts with param.discovery-script.args") as info:
        make({"discovery-script.args": "--enable-coordination", **param})
    assert info.value.keys == (f"param.{next(iter(param))}",)


def test_args_without_a_script_coordinate_in_process(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(2)
    driver = make({"discovery-script.args": f"--enable-coordination --coordination-file {coordination_file}"})
    infos = driver.retrieve_resource_info(1)
    assert indexes(infos) == ["0"]
    assert [a.index for a in CoordinationFile(coordination_file).allocations()] == ["0"]
    driver.close()
    assert CoordinationFile(coordination_file).allocations() == []


def test_coordination_parameters_with_a_script_are_errors(two_gpu_script: Path) -> None:
    with pytest.raises(ConfigError, match="--enable-coordination-mode") as info:
        make({"discovery-script.path": str(two_gpu_script), "coordination": "true"})
    assert info.value.keys == ("param.coordination",)


def test_arguments_our_command_would_reject_fail_at_construction(fake_gpus: FakeGPUs) -> None:
    with pytest.raises(
        ConfigError, match="unrecognized arguments: --enable-coordination-mod"
    ) as info:
        make(
            {"discovery-script.path": COMMAND, "discovery-script.args": "--enable-coordination-mod"}
        )
    assert info.value.keys == ("param.discovery-script.args",)


# -- script mode ---------------------------------------------------------------------------------


def test_script_mode_returns_the_amount(two_gpu_script: Path, no_nvidia_smi: None) -> None:
    driver = make({"discovery-script.path": str(two_gpu_script)})  # Flink cases 13 and 19
    infos = driver.retrieve_resource_info(2)
    assert infos == {ExternalResourceInfo(index="0"), ExternalResourceInfo(index="1")}


@pytest.mark.parametrize("amount", [0, -1, True, 1.5])
def test_the_amount_must_be_a_positive_integer(two_gpu_script: Path, amount: object) -> None:
    driver = make({"discovery-script.path": str(two_gpu_script)})  # Flink case 14
    with pytest.raises(ValueError, match="positive integer"):
        driver.retrieve_resource_info(amount)  # type: ignore[arg-type]


def test_a_failing_script_fails_at_retrieve(two_gpu_script: Path) -> None:
    driver = make(
        {"discovery-script.path": str(two_gpu_script), "discovery-script.args": "--exit-non-zero"}
    )
    with pytest.raises(
        DiscoveryError, match="exited with code 1; its stderr: boom"
    ):  # Flink case 18
        driver.retrieve_resource_info(2)


def test_the_configured_timeout_is_used(tmp_path: Path) -> None:
    script = write_script(tmp_path / "slow.sh", "sleep 30; echo 0")
    driver = make({"discovery-script.path": str(script), "discovery-script.timeout": "500 ms"})
    with pytest.raises(DiscoveryError, match="within 0.5 s"):
        driver.retrieve_resource_info(1)


def test_script_results_are_enriched_from_nvidia_smi(
    two_gpu_script: Path, fake_gpus: FakeGPUs
) -> None:
    fake_gpus([FakeGPU(index=0, name="Tesla T4", memory_total=15360), FakeGPU(index=5)])
    script = write_script(two_gpu_script.parent / "zero-and-five.sh", "echo 0,5")
    infos = sorted(make({"discovery-script.path": str(script)}).retrieve_resource_info(2))
    assert infos[0].to_dict() == {
        "index": "0",
        "uuid": fake_gpu_uuid(0),
        "name": "Tesla T4",
        "memory_total": "15360",
        "pci_bus_id": "00000000:10:00.0",
    }
    assert infos[1]["uuid"] == fake_gpu_uuid(5)
    # an index nvidia-smi does not list is the script's mistake, not a GPU
    wrong = write_script(two_gpu_script.parent / "zero-and-three.sh", "echo 0,3")
    with pytest.raises(DiscoveryError, match=r"printed GPU index\(es\) \['3'\]"):
        make({"discovery-script.path": str(wrong)}).retrieve_resource_info(2)


def test_enrichment_never_fails_discovery(two_gpu_script: Path, fake_gpus: FakeGPUs) -> None:
    fake_gpus(4, exit_code=9, stderr="driver/library version mismatch")
    infos = make({"discovery-script.path": str(two_gpu_script)}).retrieve_resource_info(2)
    assert indexes(infos) == ["0", "1"] and all(len(i) == 1 for i in infos)


def test_our_command_as_script_allocates_for_this_process_and_release_is_eager(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(3)
    params = {
        "discovery-script.path": COMMAND,
        "discovery-script.args": f"--enable-coordination --coordination-file '{coordination_file}'",
    }
    first, second = make(params), make(params)
    assert indexes(first.retrieve_resource_info(2)) == ["0", "1"]
    assert indexes(second.retrieve_resource_info(1)) == ["2"]
    ledger = CoordinationFile(coordination_file)
    assert {r.owner.pid for r in ledger.allocations()} == {os.getpid()}  # the script's parent
    with pytest.raises(DiscoveryError, match="need 1 GPU"):
        make(params).retrieve_resource_info(1)
    first.release([])  # nothing given: nothing released
    assert len(ledger.allocations()) == 3
    first.close()
    assert sorted(r.index for r in ledger.allocations()) == ["2"]
    second.close()
    assert ledger.allocations() == []


# -- in-process mode -------------------------------------------------------------------------------


def test_in_process_without_coordination_takes_the_first_gpus(fake_gpus: FakeGPUs) -> None:
    fake_gpus(4)
    infos = sorted(make({"coordination": "false"}).retrieve_resource_info(2))
    assert [i.to_dict() for i in infos] == [
        {
            "index": str(i),
            "uuid": fake_gpu_uuid(i),
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total": "81920",
            "pci_bus_id": f"00000000:1{i}:00.0",
        }
        for i in range(2)
    ]


def test_in_process_respects_cuda_visible_devices(
    fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpus(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert indexes(make({"coordination": "false"}).retrieve_resource_info(2)) == ["1", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DiscoveryError, match=r"sees 0 \(CUDA_VISIBLE_DEVICES=''\)"):
        make({"coordination": "false"}).retrieve_resource_info(1)


def test_in_process_too_few_gpus(fake_gpus: FakeGPUs) -> None:
    fake_gpus(1)
    with pytest.raises(DiscoveryError, match="need 2 GPU\\(s\\) but this TaskExecutor sees 1: 0"):
        make({"coordination": "false"}).retrieve_resource_info(2)


def test_in_process_with_no_discovery_source(no_nvidia_smi: None) -> None:
    with pytest.raises(DiscoveryError, match="nvidia-smi is not on PATH"):
        make({}).retrieve_resource_info(1)


def test_in_process_coordination_is_on_by_default_and_uses_the_per_user_file(
    fake_gpus: FakeGPUs,
) -> None:
    fake_gpus(3)
    first, second = make({}), make({})
    assert indexes(first.retrieve_resource_info(2)) == ["0", "1"]
    assert indexes(second.retrieve_resource_info(1)) == ["2"]
    with pytest.raises(DiscoveryError, match="need 1 GPU\\(s\\) but only 0 of the 3"):
        make({}).retrieve_resource_info(1)
    ledger = CoordinationFile()
    assert len(ledger.allocations()) == 3
    first.close()
    assert indexes(make({}).retrieve_resource_info(2)) == ["0", "1"]


def test_release_gives_back_only_the_given_infos(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(3)
    driver = make({"coordination-file": str(coordination_file)})
    infos = sorted(driver.retrieve_resource_info(3))
    driver.release(infos[:1])
    assert sorted(r.index for r in CoordinationFile(coordination_file).allocations()) == ["1", "2"]
    driver.close()
    driver.close()
    assert CoordinationFile(coordination_file).allocations() == []
    with pytest.raises(RuntimeError, match="closed"):
        driver.retrieve_resource_info(1)


def test_a_corrupt_coordination_file_stops_discovery(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(2)
    coordination_file.parent.mkdir(parents=True)
    coordination_file.write_text("0 4242\n")
    with pytest.raises(CoordinationError, match="not JSON"):
        make({"coordination-file": str(coordination_file)}).retrieve_resource_info(1)


def test_mig_units_are_allocated_as_units(fake_gpus: FakeGPUs, coordination_file: Path) -> None:
    from accelflow.testing._nvidia_smi import FakeMIGDevice

    fake_gpus(
        [FakeGPU(index=0, mig_devices=(FakeMIGDevice(uuid="MIG-a"), FakeMIGDevice(uuid="MIG-b")))]
    )
    driver = make({"coordination-file": str(coordination_file)})
    infos = driver.retrieve_resource_info(2)
    assert indexes(infos) == ["0:0", "0:1"]
    assert driver.isolation_env(infos)["CUDA_VISIBLE_DEVICES"] == "MIG-a,MIG-b"


# -- isolation env --------------------------------------------------------------------------------


def test_isolation_env_prefers_uuids_and_sets_pci_order() -> None:
    driver = GPUDriver()
    with_uuids = [
        ExternalResourceInfo(index="2", uuid="GPU-b"),
        ExternalResourceInfo(index="0", uuid="GPU-a"),
    ]
    assert driver.isolation_env(with_uuids) == {
        "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    mixed = [ExternalResourceInfo(index="10", uuid="GPU-b"), ExternalResourceInfo(index="2")]
    assert driver.isolation_env(mixed)["CUDA_VISIBLE_DEVICES"] == "2,10"


# -- through the framework ---------------------------------------------------------------------------


def test_the_provider_runs_the_driver_from_config_and_releases_on_close(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(2)
    config = config_from(
        values={
            "external-resources": "gpu",
            "external-resource.gpu.amount": 2,
            "external-resource.gpu.driver-factory.class": "gpu",
            "external-resource.gpu.param.coordination-file": str(coordination_file),
        }
    )
    with ExternalResourceInfoProvider.from_config(config) as provider:
        assert indexes(provider.get_external_resource_infos("gpu")) == ["0", "1"]
        assert len(CoordinationFile(coordination_file).allocations()) == 2
    assert CoordinationFile(coordination_file).allocations() == []


def test_the_public_surface_is_pinned() -> None:
    import accelflow.resources.gpu as gpu

    assert gpu.__all__ == [
        "GPU_DISCOVERY_ENV_VAR",
        "INFO_PROPERTIES",
        "OWNER_ENV_VAR",
        "PARAMS",
        "Allocation",
        "CoordinationFile",
        "GPUDevice",
        "GPUDriver",
        "GPUDriverConfig",
        "GPUDriverFactory",
        "Liveness",
        "Owner",
        "ScriptConfig",
        "Xid",
        "classify",
        "default_coordination_path",
        "discover_gpus",
        "drill_xid",
        "owner_from_env",
        "parse_script_output",
        "run_discovery_script",
        "xid_fault",
    ]
    shared = {"Allocation", "Liveness", "Owner"}  # host coordination's, for any resource
    for name in gpu.__all__:
        value = getattr(gpu, name)
        if isinstance(value, type):
            home = "accelflow.resources.coordination" if name in shared else "accelflow.resources.gpu"
            assert value.__module__ == home, name
    assert gpu.INFO_PROPERTIES == (
        "index",
        "uuid",
        "name",
        "memory_total",
        "pci_bus_id",
        "parent_index",
        "parent_uuid",
        "mig_profile",
    )
    assert list(gpu.PARAMS) == [
        "discovery-script.path",
        "discovery-script.args",
        "discovery-script.timeout",
        "coordination",
        "coordination-file",
        "coordination.lock-timeout",
    ]
