"""The Configuration view: keys by name (issue 12, item 8), "not set" apart from the default, and
the slots of a local environment sized to the job (issue 12, item 3)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from accelflow import ConfigError
from accelflow.config import Configuration, config_from, keys as k, local_slots

GPU = {
    "external-resources": "gpu",
    "external-resource.gpu.amount": 2,
    "external-resource.gpu.param.discovery-script.path": "/opt/find-gpus",
}


def test_get_takes_a_key_name_as_well_as_a_key() -> None:
    config = config_from(values={"taskmanager.numberOfTaskSlots": "3", "taskmanager.cpu.cores": "0.5"})
    assert config.get("taskmanager.numberOfTaskSlots") == 3 == config.get(k.NUMBER_OF_TASK_SLOTS)
    assert config.get("taskmanager.cpu.cores") == Fraction(1, 2)
    assert config.get("parallelism.default") == 1  # the default


def test_an_environments_config_answers_a_key_name() -> None:
    from accelflow import Environment

    config = Environment({"taskmanager.numberOfTaskSlots": 4}).config
    assert config.get("taskmanager.numberOfTaskSlots") == 4
    assert Environment().config.get("taskmanager.numberOfTaskSlots") == 1


def test_get_by_name_reads_resource_keys_and_params() -> None:
    config = config_from(values=GPU)
    assert config.get("external-resource.gpu.amount") == 2
    assert config.get("external-resources") == ("gpu",)
    assert config.get("external-resource.gpu.on-discovery-failure") == "fail"  # the default
    assert config.get("external-resource.gpu.param.discovery-script.path") == "/opt/find-gpus"
    assert config.get_optional("external-resource.gpu.driver-factory.class") is None


def test_a_name_with_no_default_and_no_value_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="ray.address is not set and has no default"):
        Configuration().get("ray.address")


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("taskmanager.numberOfTaskSlot", "did you mean 'taskmanager.numberOfTaskSlots'?"),
        ("taskmanager.numberoftaskslots", "did you mean 'taskmanager.numberOfTaskSlots'?"),
        ("external-resource.gpu.amout", "did you mean 'external-resource.gpu.amount'?"),
        ("no.such.thing.at.all", "see docs/configuration.md for every key"),
    ],
)
def test_an_unknown_name_is_a_config_error_naming_it_with_close_matches(name: str, suggestion: str) -> None:
    config = Configuration()
    for call in (config.get, config.get_optional, config.is_set):
        with pytest.raises(ConfigError) as info:
            call(name)
        assert info.value.keys == (name,)
        assert suggestion in str(info.value)


def test_a_key_of_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expected a config key or its name, got 3"):
        Configuration().get(3)  # type: ignore[call-overload]


def test_is_set_tells_a_given_value_from_the_default() -> None:
    unset = config_from(values={})
    given_default = config_from(values={"taskmanager.numberOfTaskSlots": 1})
    assert not unset.is_set(k.NUMBER_OF_TASK_SLOTS) and not unset.is_set("taskmanager.numberOfTaskSlots")
    assert given_default.is_set(k.NUMBER_OF_TASK_SLOTS) and given_default.is_set("taskmanager.numberOfTaskSlots")
    assert unset.get(k.NUMBER_OF_TASK_SLOTS) == given_default.get(k.NUMBER_OF_TASK_SLOTS) == 1


def test_is_set_survives_the_round_trip_to_another_process() -> None:
    config = config_from(definitions=["taskmanager.numberOfTaskSlots=2"])
    assert config_from(values=config.to_raw_dict()).is_set(k.NUMBER_OF_TASK_SLOTS)
    assert not config_from(values=config.to_raw_dict()).is_set(k.NUMBER_TASKMANAGER)


# -- local_slots -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "taskexecutors", "expected"),
    [(1, 1, 1), (4, 1, 4), (4, 2, 2), (5, 2, 3), (3, 4, 1), (8, 3, 3)],
)
def test_unset_slots_spread_the_largest_parallelism_over_the_taskexecutors(
    parallelism: int, taskexecutors: int, expected: int
) -> None:
    assert local_slots(Configuration(), parallelism, taskexecutors) == expected


def test_unset_slots_never_pass_the_bound() -> None:
    assert local_slots(Configuration(), 10**6, 1) == k.MAX_SLOTS_PER_TASKEXECUTOR


@pytest.mark.parametrize("slots", [1, 2, 16])
def test_a_set_value_wins_even_when_the_job_needs_more(slots: int) -> None:
    config = config_from(values={"taskmanager.numberOfTaskSlots": slots})
    assert local_slots(config, max_parallelism=64, number_of_taskexecutors=1) == slots


def test_the_slot_count_enough_for_the_job_fits_it() -> None:
    """Every subtask of the widest operator gets a slot on some TaskExecutor."""
    for parallelism in range(1, 40):
        for taskexecutors in range(1, 9):
            slots = local_slots(Configuration(), parallelism, taskexecutors)
            assert slots * taskexecutors >= parallelism
            assert (slots - 1) * taskexecutors < parallelism  # and no more than needed


@pytest.mark.parametrize(
    ("parallelism", "taskexecutors", "message"),
    [(0, 1, "max_parallelism must be a positive integer, got 0"),
     (2, 0, "number_of_taskexecutors must be a positive integer, got 0"),
     (True, 1, "max_parallelism must be a positive integer, got True"),
     (2.0, 1, "max_parallelism must be a positive integer, got 2.0")],
)
def test_local_slots_refuses_nonsense_arguments(parallelism: object, taskexecutors: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        local_slots(Configuration(), parallelism, taskexecutors)  # type: ignore[arg-type]
