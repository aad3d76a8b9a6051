"""The dataflow API on the real local cluster: operators, keyed state, partitioning, sinks,
rich functions and the RuntimeContext, checked against plain Python."""

from __future__ import annotations

import functools
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from runtime_jobs import (
    Context, Instances, JournaledFilter, JournaledMap, JournaledSink, JsonLinesSink, Splits, Tenfold,
    WhereAmI, append_line,
)

from accelflow import AccelflowError, ConfigError, Environment, JobError

CONF = {"taskmanager.numberOfTaskSlots": 4}
WORDS = "the quick brown fox jumps over the lazy dog and the dog sleeps".split()


def test_map_flat_map_filter_match_python() -> None:
    env = Environment(CONF)
    items = list(range(1000))
    out = (
        env.from_collection(items, parallelism=2)
        .flat_map(lambda x: [x] * (x % 3), name="repeat")
        .filter(lambda x: x % 5 != 0, name="drop fives")
        .map(lambda x: x * x, name="square", parallelism=3)
        .execute_and_collect()
    )
    expected = [x * x for x in items for _ in range(x % 3) if x % 5 != 0]
    assert sorted(out) == sorted(expected)
    ops = env.last_result.operators
    assert ops["repeat"] == {"records_in": 1000, "records_out": sum(x % 3 for x in items)}
    assert ops["drop fives"]["records_out"] == len(expected)
    assert ops["square"] == {"records_in": len(expected), "records_out": len(expected)}


def test_execute_returns_status_duration_and_counts(tmp_path: Path) -> None:
    env = Environment(CONF)
    env.from_sequence(1, 100).filter(lambda x: x % 2 == 0, name="evens").sink_to_file(tmp_path / "out")
    result = env.execute("counting")
    assert result.status == "FINISHED" and result.name == "counting" and result.attempts == 1
    assert result.duration_s > 0 and result.startup_s is not None and result.startup_s <= result.duration_s
    assert result.operators == {
        "sequence": {"records_in": 0, "records_out": 100},
        "evens": {"records_in": 100, "records_out": 50},
        "file sink": {"records_in": 50, "records_out": 0},
    }


def test_map_batches_over_numpy_rows() -> None:
    rows = np.arange(5000 * 3, dtype=np.float32).reshape(5000, 3)
    env = Environment(CONF)

    def sums_and_sizes(batch: Any) -> Any:
        assert isinstance(batch, np.ndarray) and batch.shape[1:] == (3,)
        return np.column_stack([batch.sum(axis=1), np.full(len(batch), len(batch))])

    out = env.from_collection(rows, parallelism=2).map_batches(sums_and_sizes, batch_size=300, parallelism=2).execute_and_collect()
    got = np.array(out)
    assert got.shape == (5000, 2)
    np.testing.assert_array_equal(np.sort(got[:, 0]), np.sort(rows.sum(axis=1)))
    sizes = Counter(got[:, 1].astype(int).tolist())
    assert max(sizes) == 300  # never more than batch_size; only each subtask's tail is short
    assert sum(n for size, n in sizes.items() if size != 300) <= 2 * 299


def test_map_batches_over_tuple_columns_and_lists() -> None:
    env = Environment(CONF)
    pairs = [(i, WORDS[i % len(WORDS)]) for i in range(500)]

    def columns(batch: Any) -> Any:
        numbers, words = batch
        assert isinstance(numbers, np.ndarray) and isinstance(words, np.ndarray)
        return numbers * 2, np.char.upper(words)

    out = env.from_collection(pairs).map_batches(columns, batch_size=64).execute_and_collect()
    assert [(int(a), str(b)) for a, b in out] == [(i * 2, w.upper()) for i, w in pairs]

    env = Environment(CONF)
    objects = [{"word": w} for w in WORDS]
    out = env.from_collection(objects).map_batches(lambda b: [d["word"][::-1] for d in b], batch_size=4).execute_and_collect()
    assert out == [w[::-1] for w in WORDS]


def test_map_batches_that_return_junk_fail_naming_the_operator() -> None:
    env = Environment(CONF)
    env.from_sequence(1, 10).map_batches(lambda b: {"not": "a batch"}, name="featurize").add_sink(lambda x: None)
    with pytest.raises(JobError, match="featurize: map_batches must return a NumPy array, a tuple of arrays or a list, got dict"):
        env.execute()


def test_keyed_sum_and_reduce_in_batch_mode_give_final_values() -> None:
    env = Environment(dict(CONF, **{"execution.runtime-mode": "batch"}))
    counts = (
        env.from_collection([(w, 1) for w in WORDS * 50], parallelism=2)
        .key_by(lambda t: t[0])
        .sum(1, parallelism=3)
        .execute_and_collect()
    )
    assert sorted(counts) == sorted(Counter(WORDS * 50).items())

    env = Environment(dict(CONF, **{"execution.runtime-mode": "batch"}))
    longest = (
        env.from_collection(WORDS, parallelism=2)
        .key_by(lambda w: w[0])
        .reduce(lambda a, b: max(a, b), parallelism=2)
        .execute_and_collect()
    )
    expected: dict[str, str] = {}
    for w in WORDS:
        expected[w[0]] = max(expected.get(w[0], w), w)
    assert sorted(longest) == sorted(expected.values())


def test_keyed_sum_in_streaming_mode_gives_running_values() -> None:
    pairs = [(x % 4, x) for x in range(1, 301)]
    env = Environment(dict(CONF, **{"execution.runtime-mode": "streaming"}))
    out = env.from_collection(pairs, parallelism=2).key_by(lambda t: t[0]).sum(1, parallelism=2).execute_and_collect()
    assert len(out) == len(pairs)  # one running value per record, not one per key
    for key in range(4):
        running = [total for k, total in out if k == key]
        increments = [b - a for a, b in zip([0, *running], running)]
        # the running values of a key step by exactly that key's records, whatever the
        # interleaving of the two source subtasks, and end at the key's total
        assert sorted(increments) == sorted(x for k, x in pairs if k == key)
        assert running[-1] == sum(x for k, x in pairs if k == key)


def test_streaming_running_values_in_order_for_one_source() -> None:
    env = Environment(dict(CONF, **{"execution.runtime-mode": "streaming"}))
    pairs = [(w, 1) for w in WORDS]
    out = env.from_collection(pairs).key_by(lambda t: t[0]).sum(1).execute_and_collect()
    running: Counter[str] = Counter()
    expected = []
    for w, n in pairs:
        running[w] += n
        expected.append((w, running[w]))
    assert out == expected


def test_rebalance_spreads_records_over_every_subtask() -> None:
    env = Environment(CONF)
    out = env.from_sequence(0, 9999, parallelism=1).rebalance().map(WhereAmI, parallelism=3).execute_and_collect()
    assert sorted(x for _, x in out) == list(range(10000))
    per_subtask = Counter(i for i, _ in out)
    assert set(per_subtask) == {0, 1, 2}
    assert max(per_subtask.values()) - min(per_subtask.values()) <= 1024  # round-robin chunks


def test_user_source_splits_go_to_subtask_j_mod_parallelism() -> None:
    env = Environment(CONF)
    out = env.from_source(Splits(), parallelism=2).execute_and_collect()
    assert sorted(out) == [(0, "a@0"), (1, "b@1"), (2, "c@0"), (3, "d@1"), (4, "e@0")]


def test_sink_to_file_writes_every_record_in_subtask_order(tmp_path: Path) -> None:
    target = tmp_path / "squares.txt"
    env = Environment(CONF)
    env.from_sequence(1, 2000, parallelism=2).map(lambda x: x * x, parallelism=2).sink_to_file(target)
    env.execute()
    assert target.read_text(encoding="utf-8") == "".join(f"{x * x}\n" for x in range(1, 2001))
    assert os.listdir(tmp_path) == ["squares.txt"]  # no part or temp files left


def test_sink_to_file_refuses_a_missing_directory(tmp_path: Path) -> None:
    env = Environment(CONF)
    with pytest.raises(ConfigError, match="does not exist") as info:
        env.from_sequence(1, 2).sink_to_file(tmp_path / "nope" / "out.txt")
    assert "nope" in info.value.keys[0]


def test_user_sinks_instance_and_plain_callable(tmp_path: Path) -> None:
    (tmp_path / "json").mkdir()
    sink = JsonLinesSink(str(tmp_path / "json"))
    lines = tmp_path / "lines.txt"
    env = Environment(CONF)
    numbers = env.from_sequence(1, 50, parallelism=2)
    numbers.add_sink(sink, parallelism=2)
    numbers.map(lambda x: -x).add_sink(functools.partial(append_line, str(lines)), parallelism=1)
    env.execute()
    assert sorted(sink.read()) == list(range(1, 51))
    assert sorted(int(x) for x in lines.read_text(encoding="utf-8").split()) == list(range(-50, 0))


def test_print_prefixes_subtasks_when_parallel(capfd: pytest.CaptureFixture[str]) -> None:
    env = Environment(CONF)
    env.from_sequence(1, 6, parallelism=2).map(lambda x: f"v{x}", parallelism=2).print()
    env.from_sequence(7, 8).map(lambda x: f"w{x}").print()
    env.execute()
    lines = capfd.readouterr().out.splitlines()
    assert sorted(lines) == sorted(["1> v1", "1> v2", "1> v3", "2> v4", "2> v5", "2> v6", "w7", "w8"])


def test_runtime_context_fields() -> None:
    env = Environment(CONF)
    out = env.from_sequence(0, 5, parallelism=3).map(Context, name="inspect", parallelism=3).execute_and_collect()
    seen = {r["index"]: r for r in out}
    assert sorted(seen) == [0, 1, 2]
    for index, r in seen.items():
        assert r["task_name"] == "sequence -> inspect -> collect"
        assert r["operator_name"] == "inspect"
        assert (r["parallelism"], r["attempt"], r["taskexecutor"], r["cancelled"]) == (3, 0, "taskexecutor-1", False)
        assert r["repr"] == f"RuntimeContext(task_name='sequence -> inspect -> collect', subtask={index}/3, attempt=0)"


def test_rich_functions_open_before_and_close_after_their_records(tmp_path: Path) -> None:
    env = Environment(CONF)
    (
        env.from_sequence(1, 4, parallelism=2)
        .map(JournaledMap(str(tmp_path)), parallelism=2)
        .filter(JournaledFilter(str(tmp_path)), parallelism=2)
        .add_sink(JournaledSink(str(tmp_path)), parallelism=2)
    )
    env.execute()
    for index, values in [(0, [1, 2]), (1, [3, 4])]:
        logs = {name: (tmp_path / f"{name}-{index}.log").read_text(encoding="utf-8").splitlines()
                for name in ("map", "filter", "sink")}
        assert [e.split()[0] for e in logs["map"]] == ["open", "map", "map", "close"]
        assert logs["map"][1:] == [f"map {v}" for v in values] + ["close map"]
        assert logs["filter"][1:] == [f"filter {v * 10}" for v in values] + ["close filter"]
        assert logs["sink"][1:] == [f"invoke {v * 10}" for v in values if v * 10 % 20 == 0] + ["close sink"]
        pids = {log[0].split()[2] for log in logs.values()}
        assert len(pids) == 1  # one chained subtask process runs all three


def test_a_class_is_built_once_in_each_subtask() -> None:
    env = Environment(CONF)
    out = env.from_sequence(0, 99, parallelism=2).map(Instances, parallelism=2).execute_and_collect()
    instances = {index: {obj for _, i, obj in out if i == index} for index in (0, 1)}
    assert all(len(objs) == 1 for objs in instances.values())  # one instance per subtask
    assert sorted(v for v, _, _ in out) == list(range(100))

    env = Environment(CONF)
    out = env.from_sequence(0, 9, parallelism=2).map(Tenfold, parallelism=2).execute_and_collect()
    assert sorted(v for v, _ in out) == [x * 10 for x in range(10)]
    assert len({pid for _, pid in out}) == 2 and os.getpid() not in {pid for _, pid in out}


def test_bad_jobs_are_refused_before_anything_starts() -> None:
    env = Environment(CONF)
    with pytest.raises(ConfigError, match="parallelism must be a positive integer"):
        env.from_sequence(1, 2).map(abs, parallelism=0)
    with pytest.raises(ConfigError, match=r"expected a function or an object with a map\(\) method, got int"):
        env.from_sequence(1, 2).map(42)
    with pytest.raises(ConfigError, match="batch_size must be a positive integer"):
        env.from_sequence(1, 2).map_batches(abs, batch_size=0)
    with pytest.raises(ConfigError, match="more than one device") as info:
        env.from_sequence(1, 2).map(abs, name="train", resources={"gpu": 1.5})
    assert info.value.keys == ("operator 'train' resources['gpu']",)
    env2 = Environment(CONF)
    with pytest.raises(AccelflowError, match="the job has no sink"):
        env2.from_sequence(1, 2).map(abs)
        env2.execute()


def test_keys_route_alike_from_every_taskexecutor() -> None:
    """Sources on two TaskExecutor processes must send a key to the same reducer, also for
    keys whose built-in hash differs between processes (``hash(None)`` is an address)."""
    env = Environment({"local.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": 2,
                       "scheduler.placement-policy": "spread",  # source subtask i on taskexecutor-(i+1)
                       "execution.runtime-mode": "batch"})  # one count per key
    records = [((None, i % 10), 1) for i in range(400)]
    counts = env.from_collection(records, parallelism=2).key_by(lambda r: r[0]).sum(1, parallelism=3).execute_and_collect()
    assert sorted(counts, key=lambda r: r[0][1]) == [((None, k), 40) for k in range(10)]


def test_stable_hash_agrees_between_processes() -> None:
    import subprocess
    import sys

    code = ("from accelflow.runtime.subtask import stable_hash; "
            "print([stable_hash(k) for k in [None, (None, 'a', 1), frozenset({None, 'b'}), 'x', b'y', 2.5]])")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout for seed in (1, 2)}
    assert len(outputs) == 1
