"""The PyFlink methods of :class:`~accelflow.Environment`, which is also PyFlink's
``StreamExecutionEnvironment`` (one class, two names): ``get_execution_environment``,
``set_runtime_mode``, ``get_checkpoint_config``, ``get_config``, ``add_source``... Methods
PyFlink has that accelflow cannot honour raise :class:`~accelflow.NotSupportedError` naming
the alternative, never silently nothing.

Example:
    >>> from accelflow import RuntimeExecutionMode, StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.set_runtime_mode(RuntimeExecutionMode.BATCH).set_parallelism(2).get_parallelism()
    2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from accelflow._errors import ConfigError, NotSupportedError
from accelflow.api._pyflink import CheckpointConfig, CheckpointingMode, ExecutionConfig, RuntimeExecutionMode
from accelflow.config import Configuration
from accelflow.config import keys as k

if TYPE_CHECKING:
    from accelflow.api._stream import DataStream
    from accelflow.dataflow import Source

E = TypeVar("E", bound="PyFlinkEnvironment")

_NO_JVM = "accelflow runs no JVM: use a Python source or sink (accelflow.Source/Sink, the file and Kafka connectors)"
_NO_SHIPPING = ("accelflow's subtasks import the job script's modules from the client's Python: install them "
                "there (pip), or use Ray's runtime env (ray.runtime-env.working-dir) on the Ray target")


class PyFlinkEnvironment:
    """PyFlink's ``StreamExecutionEnvironment`` methods, mixed into ``Environment``."""

    config: Configuration

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        raise NotImplementedError  # Environment's

    def _set(self: E, key: str, value: Any) -> E:
        raise NotImplementedError  # Environment's

    def from_source(self, source: Source[Any], watermark_strategy: Any = None, source_name: str | None = None,
                    type_info: Any = None, *, name: str | None = None,
                    parallelism: int | None = None) -> DataStream:
        raise NotImplementedError  # Environment's

    @classmethod
    def get_execution_environment(cls: type[E], configuration: Mapping[str, Any] | None = None) -> E:
        """A new environment (PyFlink's entry point), configured by ``configuration`` (a
        :class:`~accelflow.Configuration` or any mapping of config keys), under ``accelflow
        run`` by the CLI's ``--conf`` and ``-D`` too."""
        return cls(configuration)

    def set_runtime_mode(self: E, execution_mode: RuntimeExecutionMode) -> E:
        """``execution.runtime-mode``: ``RuntimeExecutionMode.STREAMING``, ``BATCH`` or
        ``AUTOMATIC``."""
        mode = getattr(execution_mode, "name", None)
        if mode not in RuntimeExecutionMode.__members__:
            raise ConfigError(f"expected RuntimeExecutionMode.STREAMING, BATCH or AUTOMATIC, got {execution_mode!r}",
                              key="set_runtime_mode")
        return self._set(k.RUNTIME_MODE.name, str(mode).lower())

    def get_checkpoint_config(self) -> CheckpointConfig:
        """The checkpoint settings (``execution.checkpointing.*``), PyFlink's setters."""
        return CheckpointConfig(self)  # type: ignore[arg-type]  # Environment is its only class

    def get_config(self) -> ExecutionConfig:
        """PyFlink's ``ExecutionConfig`` (auto-watermark interval, parallelism)."""
        return ExecutionConfig(self)  # type: ignore[arg-type]

    def get_max_parallelism(self) -> int:
        """``pipeline.max-parallelism``, or -1 when not set (Flink's rule applies)."""
        value = self.config.get(k.PIPELINE_MAX_PARALLELISM)
        return -1 if value is None else int(value)

    def get_buffer_timeout(self) -> int:
        """``execution.buffer-timeout`` in milliseconds (-1: only full chunks are sent)."""
        value = self.config.get(k.BUFFER_TIMEOUT)
        return -1 if value is None or value < 0 else round(value * 1000)

    def get_checkpoint_interval(self) -> int:
        """The checkpoint interval in milliseconds, -1 when checkpointing is off."""
        return self.get_checkpoint_config().get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode.EXACTLY_ONCE

    def is_chaining_enabled(self) -> bool:
        return True

    def add_source(self, source_func: Source[Any], source_name: str = "Custom Source",
                   type_info: Any = None) -> DataStream:
        """PyFlink's ``add_source``: here ``source_func`` is an :class:`accelflow.Source` (a
        Java ``SourceFunction`` has no JVM to run in)."""
        return self.from_source(source_func, None, source_name, type_info)

    def close(self) -> None:
        """PyFlink's ``close()``: an environment holds nothing between jobs."""

    # -- what accelflow cannot honour -----------------------------------------------------
    def add_jars(self, *jars_path: str) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.add_jars()", _NO_JVM)

    def add_classpaths(self, *classpaths: str) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.add_classpaths()", _NO_JVM)

    def add_python_file(self, file_path: str) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.add_python_file()", _NO_SHIPPING)

    def add_python_archive(self, archive_path: str, target_dir: str | None = None) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.add_python_archive()", _NO_SHIPPING)

    def set_python_requirements(self, requirements_file_path: str, requirements_cache_dir: str | None = None
                                ) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.set_python_requirements()", _NO_SHIPPING)

    def set_python_executable(self, python_exec: str) -> NoReturn:
        raise NotSupportedError.pyflink(
            "StreamExecutionEnvironment.set_python_executable()",
            "subtasks run the client's Python interpreter: start the job with the one you want")

    def set_state_backend(self, state_backend: Any) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.set_state_backend()",
                                        "accelflow keeps state in the subtask's memory and checkpoints it to "
                                        "execution.checkpointing.dir; set that key instead")

    def enable_changelog_state_backend(self, enabled: bool) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.enable_changelog_state_backend()",
                                        "accelflow has no changelog state backend: leave it off")

    def disable_operator_chaining(self) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.disable_operator_chaining()",
                                        "give an operator its own parallelism or resources to start a new chain")

    def register_cached_file(self, file_path: str, name: str, executable: bool = False) -> NoReturn:
        raise NotSupportedError.pyflink(
            "StreamExecutionEnvironment.register_cached_file()",
            "read the file by its path (TaskExecutors run on this host or share its file system)")

    def register_type_with_kryo_serializer(self, type_class_name: str, serializer_class_name: str) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.register_type_with_kryo_serializer()",
                                        "records are Python objects (pickled); there is no Kryo")

    def add_default_kryo_serializer(self, type_class_name: str, serializer_class_name: str) -> NoReturn:
        raise NotSupportedError.pyflink("StreamExecutionEnvironment.add_default_kryo_serializer()",
                                        "records are Python objects (pickled); there is no Kryo")

    def set_restart_strategy(self, restart_strategy_configuration: Any) -> NoReturn:
        raise NotSupportedError.pyflink(
            "StreamExecutionEnvironment.set_restart_strategy()",
            "set restart-strategy: fixed-delay and restart-strategy.fixed-delay.attempts/.delay "
            "(Flink's keys) in the config")


__all__ = ["PyFlinkEnvironment"]
