"""Key aliases (issue 13): Flink's older names of the checkpointing keys work wherever the key
does, are stored under the key's own name, and may not contradict it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelflow import ConfigError
from accelflow.config import Configuration, config_from
from accelflow.config import keys as k

ALIASED: list[tuple[k.Key[Any], str, str, object]] = [
    (k.CHECKPOINT_DIR, "state.checkpoints.dir", "s3://bucket/ckpt", "s3://bucket/ckpt"),
    (k.CHECKPOINTS_RETAINED, "state.checkpoints.num-retained", "3", 3),
    (k.SAVEPOINT_DIR, "state.savepoints.dir", "/data/savepoints", "/data/savepoints"),
    (k.STATE_RECOVERY_PATH, "execution.savepoint.path", "/ckpt/job/chk-4", "/ckpt/job/chk-4"),
    (k.ALLOW_NON_RESTORED_STATE, "execution.savepoint.ignore-unclaimed-state", "true", True),
]


def test_every_alias_names_its_key() -> None:
    assert {alias: key.name for key, alias, _, _ in ALIASED} == k.ALIASES
    assert all(alias in key.aliases for key, alias, _, _ in ALIASED)


@pytest.mark.parametrize(("key", "alias", "given", "parsed"), ALIASED, ids=[a for _, a, _, _ in ALIASED])
def test_an_alias_in_a_dict_is_stored_and_read_under_the_key(key: k.Key[Any], alias: str, given: str,
                                                             parsed: object) -> None:
    config = config_from(values={alias: given})
    assert config.get(key) == parsed and config.is_set(key)
    assert config.get(alias) == parsed and config.is_set(alias)
    assert config.to_raw_dict() == {key.name: given}  # another process loads the key, not the alias
    assert config.sources == {key.name: "dict"}


def test_an_alias_works_in_yaml_and_in_definitions(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text("state.checkpoints.dir: /ckpt\nstate.checkpoints.num-retained: 2\n", encoding="utf-8")

    config = config_from(conf_file=conf, definitions=["execution.savepoint.path=/ckpt/job/chk-2"])

    assert config.get(k.CHECKPOINT_DIR) == "/ckpt" and config.get(k.CHECKPOINTS_RETAINED) == 2
    assert config.get(k.STATE_RECOVERY_PATH) == "/ckpt/job/chk-2"
    assert config.sources[k.CHECKPOINT_DIR.name] == str(conf)
    assert config.sources[k.STATE_RECOVERY_PATH.name] == "-D"


def test_a_later_source_overrides_an_alias_like_any_key(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text("state.checkpoints.dir: /from-file\n", encoding="utf-8")

    config = config_from(conf_file=conf, definitions=["execution.checkpointing.dir=/from-d"])
    assert config.get(k.CHECKPOINT_DIR) == "/from-d"
    config = config_from(values={"execution.checkpointing.dir": "/from-dict"},
                         definitions=["state.checkpoints.dir=/from-d"])
    assert config.get(k.CHECKPOINT_DIR) == "/from-d"


def test_a_key_and_its_alias_with_different_values_in_one_source_name_both(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text("execution.checkpointing.dir: /a\nstate.checkpoints.dir: /b\n", encoding="utf-8")

    loads: list[Callable[[], Configuration]] = [
        lambda: config_from(conf_file=conf),
        lambda: config_from(definitions=["state.checkpoints.dir=/b", "execution.checkpointing.dir=/a"]),
    ]
    for load in loads:
        with pytest.raises(ConfigError) as caught:
            load()
        (problem,) = caught.value.problems
        assert problem.key == "state.checkpoints.dir"
        assert "execution.checkpointing.dir" in problem.message and "'/a'" in problem.message
        assert "'/b'" in problem.message and "set only execution.checkpointing.dir" in problem.message


def test_a_key_and_its_alias_with_the_same_value_are_fine() -> None:
    config = config_from(values={"state.checkpoints.num-retained": 2, "execution.checkpointing.num-retained": 2})
    assert config.get(k.CHECKPOINTS_RETAINED) == 2


def test_a_bad_value_under_an_alias_is_reported_as_written() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from(values={"state.checkpoints.num-retained": 0})
    (problem,) = caught.value.problems
    assert problem.key == "state.checkpoints.num-retained" and problem.source == "dict"
    assert "expected a positive integer up to 1000" in problem.message
    assert "alias of execution.checkpointing.num-retained" in problem.message


@pytest.mark.parametrize(("typo", "hint"), [
    ("state.checkpoint.dir", "state.checkpoints.dir"),
    ("execution.checkpointing.dirs", "execution.checkpointing.dir"),
])
def test_unknown_keys_are_still_matched_against_keys_and_aliases(typo: str, hint: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown key; did you mean '{hint}'"):
        config_from(values={typo: "/x"})
    with pytest.raises(ConfigError, match=f"did you mean .*'{hint}'"):
        Configuration().get(typo)


def test_unset_keys_have_their_defaults() -> None:
    config = Configuration()
    assert config.get_optional(k.CHECKPOINT_INTERVAL) is None and config.get_optional(k.CHECKPOINT_DIR) is None
    assert config.get(k.CHECKPOINT_TIMEOUT) == 600.0 and config.get(k.CHECKPOINT_MIN_PAUSE) == 0.0
    assert config.get(k.CHECKPOINTS_RETAINED) == 1 and config.get(k.ALLOW_NON_RESTORED_STATE) is False
    assert config.get(k.CHECKPOINT_RETENTION) == "DELETE_ON_CANCELLATION"
    assert not config.is_set("state.checkpoints.dir")


@pytest.mark.parametrize(("given", "parsed"), [
    ("retain_on_cancellation", "RETAIN_ON_CANCELLATION"),
    ("NO_EXTERNALIZED_CHECKPOINTS", "NO_EXTERNALIZED_CHECKPOINTS"),
    ("Delete_On_Cancellation", "DELETE_ON_CANCELLATION"),
])
def test_retention_takes_flinks_names_in_any_case(given: str, parsed: str) -> None:
    assert config_from(values={k.CHECKPOINT_RETENTION.name: given}).get(k.CHECKPOINT_RETENTION) == parsed


@pytest.mark.parametrize(("key", "value", "message"), [
    (k.CHECKPOINT_RETENTION.name, "KEEP", "expected one of DELETE_ON_CANCELLATION, RETAIN_ON_CANCELLATION"),
    (k.CHECKPOINT_INTERVAL.name, "0", "positive, finite duration"),
    (k.CHECKPOINT_MIN_PAUSE.name, "-1 s", "duration"),
    (k.CHECKPOINTS_RETAINED.name, 1001, "up to 1000"),
    (k.ALLOW_NON_RESTORED_STATE.name, "maybe", "true or false"),
])
def test_bad_checkpointing_values_are_errors(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        config_from(values={key: value})
    assert caught.value.keys == (key,)


def test_durations_are_parsed() -> None:
    config = config_from(values={k.CHECKPOINT_INTERVAL.name: "500 ms", k.CHECKPOINT_TIMEOUT.name: "2 min"})
    assert config.get(k.CHECKPOINT_INTERVAL) == 0.5 and config.get(k.CHECKPOINT_TIMEOUT) == 120.0


def test_the_docs_list_every_alias() -> None:
    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    for alias, name in k.ALIASES.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"Also accepted as `{alias}`" in row
