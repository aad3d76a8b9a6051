"""PyFlink's environment surface on accelflow (issue 30): ``StreamExecutionEnvironment`` is
``Environment``, its setters write accelflow's config keys, ``Row`` behaves as PyFlink's, and
what accelflow cannot honour raises ``NotSupportedError`` naming the method."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from accelflow import (
    CheckpointingMode, Configuration, ConfigError, Encoder, Environment, ExternalizedCheckpointRetention, FileSink,
    FileSource, NotSupportedError, OutputFileConfig, RollingPolicy, Row, RowKind, RuntimeExecutionMode,
    StreamExecutionEnvironment, StreamFormat, Types,
)


def test_stream_execution_environment_is_environment_with_pyflinks_setters() -> None:
    conf = Configuration().set_integer("parallelism.default", 3)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert StreamExecutionEnvironment is Environment and isinstance(env, Environment)
    assert env.get_parallelism() == 3
    env.set_runtime_mode(RuntimeExecutionMode.BATCH).enable_checkpointing(1000, CheckpointingMode.AT_LEAST_ONCE)
    assert env.config.get("execution.runtime-mode") == "batch"
    assert env.get_checkpoint_interval() == 1000
    checkpoints = env.get_checkpoint_config()
    checkpoints.set_min_pause_between_checkpoints(500).set_checkpoint_timeout(60_000) \
        .set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    assert (checkpoints.get_min_pause_between_checkpoints(), checkpoints.get_checkpoint_timeout()) == (500, 60_000)
    assert env.config.get("execution.checkpointing.externalized-checkpoint-retention") == "RETAIN_ON_CANCELLATION"
    assert checkpoints.is_checkpointing_enabled()
    env.get_config().set_auto_watermark_interval(50)
    assert env.get_config().get_auto_watermark_interval() == 50
    env.set_buffer_timeout(0)
    assert env.get_buffer_timeout() == 0


def test_bad_pyflink_arguments_name_the_method() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ConfigError, match="set_runtime_mode"):
        env.set_runtime_mode("BATCH")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"enable_checkpointing\(mode\)"):
        env.enable_checkpointing(1000, "exactly")
    with pytest.raises(ConfigError, match="set_checkpoint_timeout"):
        env.get_checkpoint_config().set_checkpoint_timeout(0)


@pytest.mark.parametrize("call, method", [
    (lambda env: env.add_jars("file:///x.jar"), "add_jars"),
    (lambda env: env.set_state_backend(object()), "set_state_backend"),
    (lambda env: env.add_python_file("deps.zip"), "add_python_file"),
    (lambda env: env.get_checkpoint_config().enable_unaligned_checkpoints(), "enable_unaligned_checkpoints"),
    (lambda env: env.get_checkpoint_config().set_max_concurrent_checkpoints(2), "set_max_concurrent_checkpoints"),
    (lambda env: FileSink.for_row_format("out", Encoder.simple_string_encoder()).with_bucket_assigner(None),
     "with_bucket_assigner"),
    (lambda env: Encoder.simple_string_encoder("latin-1"), "simple_string_encoder"),
])
def test_what_accelflow_cannot_honour_raises_not_supported(call, method: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(NotSupportedError, match=method) as raised:
        call(env)
    assert isinstance(raised.value, NotImplementedError) and isinstance(raised.value, ConfigError)


def test_row_has_pyflinks_semantics() -> None:
    named = Row(name="Alice", age=11)
    assert (named.name, named["age"], named[0], "name" in named, len(named)) == ("Alice", 11, "Alice", True, 2)
    assert repr(named) == "Row(name='Alice', age=11)" and repr(Row(1, "a")) == "<Row(1, 'a')>"
    assert named == Row(age=11, name="Alice") and named != Row("Alice", 11)
    assert Row("name", "age")("Bob", 12) == Row(name="Bob", age=12)
    assert named.as_dict() == {"name": "Alice", "age": 11}
    assert pickle.loads(pickle.dumps(Row.of_kind(RowKind.DELETE, 1))) == Row.of_kind(RowKind.DELETE, 1)
    assert str(RowKind.UPDATE_AFTER) == "+U"
    with pytest.raises(AttributeError):
        named.missing  # noqa: B018
    with pytest.raises(ValueError, match="both args and kwargs"):
        Row(1, name="x")


def test_typed_collection_gives_rows_and_prints_as_pyflink(capfd: pytest.CaptureFixture[str]) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    rows = env.from_collection(collection=[(1, "Flink", 0.1)],
                               type_info=Types.ROW_NAMED(["id", "name", "score"],
                                                         [Types.INT(), Types.STRING(), Types.FLOAT()]))
    rows.print()
    rows.map(lambda r: (r.name, r.id), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).print()
    env.execute("typed")
    assert sorted(capfd.readouterr().out.splitlines()) == ["(Flink,1)", "+I[1,Flink,0.1]"]  # two sinks: any order
    with env.from_collection(collection=[(1, "Flink", 0.1)],
                             type_info=Types.ROW_NAMED(["id", "name", "score"],
                                                       [Types.INT(), Types.STRING(), Types.FLOAT()])
                             ).execute_and_collect() as results:
        assert list(results) == [Row(id=1, name="Flink", score=0.10000000149011612)]


def test_execute_runs_only_the_sinks_added_since_the_last_job(capfd: pytest.CaptureFixture[str]) -> None:
    """PyFlink's ``basic_operations``: one source, one job per ``print(); execute()``."""
    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_collection([1, 2, 3])
    numbers.map(lambda x: x * 10).print()
    env.execute()
    numbers.filter(lambda x: x > 2).print()
    env.execute()
    assert capfd.readouterr().out.splitlines() == ["10", "20", "30", "3"]
    assert numbers.execute_and_collect(limit=2) == [1, 2]


def test_file_source_and_sink_built_as_in_pyflink(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x y\nz\n", encoding="utf-8")
    (tmp_path / "in" / ".hidden").write_text("never read\n", encoding="utf-8")
    env = StreamExecutionEnvironment.get_execution_environment()
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "in")) \
        .process_static_file_set().build()
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()) \
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".ext").build()) \
        .with_rolling_policy(RollingPolicy.default_rolling_policy()).build()
    env.from_source(source, None, "lines").map(lambda line: (line, len(line)),
                                                output_type=Types.TUPLE([Types.STRING(), Types.INT()])).sink_to(sink)
    env.execute()
    parts = list((tmp_path / "out").glob("pre-*.ext"))
    assert sorted(line for p in parts for line in p.read_text().splitlines()) == ["(x y,3)", "(z,1)"]
