"""PyFlink's environment-side names, so that a PyFlink job ports by changing its imports:
``RuntimeExecutionMode``, ``CheckpointingMode``, ``ExternalizedCheckpointRetention``,
``Configuration`` (``pyflink.common``), the ``CheckpointConfig`` and ``ExecutionConfig`` an
environment hands out, and the records ``execute_and_collect()`` returns (a list that is also
PyFlink's closeable iterator). Each setter writes accelflow's config key of the same meaning
(Flink's key where accelflow has it); what accelflow cannot honour raises
:class:`~accelflow.NotSupportedError` naming the alternative.

Example:
    >>> conf = Configuration().set_integer("parallelism.default", 2)
    >>> conf.get_string("parallelism.default", "1"), conf.to_dict()
    ('2', {'parallelism.default': '2'})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn

from accelflow._errors import ConfigError, NotSupportedError
from accelflow.config import keys as k

if TYPE_CHECKING:
    from accelflow.api._environment import Environment


class RuntimeExecutionMode(Enum):
    """``execution.runtime-mode`` (PyFlink's ``RuntimeExecutionMode``)."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2


class CheckpointingMode(Enum):
    """PyFlink's ``CheckpointingMode``. accelflow's checkpoints align their barriers, so they
    are exactly once; ``AT_LEAST_ONCE`` (a weaker promise) gets exactly once too."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1


class ExternalizedCheckpointRetention(Enum):
    """``execution.checkpointing.externalized-checkpoint-retention`` (PyFlink 2's enum; 1.x's
    ``ExternalizedCheckpointCleanup`` has the same members)."""

    DELETE_ON_CANCELLATION = 0
    RETAIN_ON_CANCELLATION = 1
    NO_EXTERNALIZED_CHECKPOINTS = 2



def millis(value: Any, what: str, *, minimum: int = 0) -> int:
    """``value`` checked as a whole number of milliseconds (>= ``minimum``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"expected milliseconds as an integer >= {minimum}, got {value!r}", key=what)
    return value


def _to_millis(seconds: float | None) -> int:
    return -1 if seconds is None else round(seconds * 1000)


class Configuration(Mapping[str, str]):
    """PyFlink's ``Configuration``: flat config keys to string values, given to
    ``StreamExecutionEnvironment.get_execution_environment(configuration)`` (or to
    ``Environment(...)``, as any mapping). Values are checked when an environment reads them.

    Args:
        other: a ``Configuration`` or mapping to copy.
    """

    def __init__(self, other: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, str] = {key: _text(v) for key, v in (other or {}).items()}

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Configuration({self._data!r})"

    def set_string(self, key: str, value: str) -> Configuration:
        self._data[key] = _text(value)
        return self

    set_integer = set_float = set_boolean = set_string  # PyFlink's typed setters store text too

    def get_string(self, key: str, default_value: str) -> str:
        return self._data.get(key, default_value)

    def get_integer(self, key: str, default_value: int) -> int:
        return int(self._data[key]) if key in self._data else default_value

    def get_float(self, key: str, default_value: float) -> float:
        return float(self._data[key]) if key in self._data else default_value

    def get_boolean(self, key: str, default_value: bool) -> bool:
        return self._data[key].lower() == "true" if key in self._data else default_value

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def key_set(self) -> set[str]:
        return set(self._data)

    def remove_config(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def add_all(self, other: Mapping[str, Any], prefix: str | None = None) -> Configuration:
        self._data.update({(prefix or "") + key: _text(v) for key, v in other.items()})
        return self

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class ExecutionConfig:
    """What ``env.get_config()`` returns (PyFlink's ``ExecutionConfig``): a view of the
    environment's config keys."""

    def __init__(self, env: Environment) -> None:
        self._env = env

    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        """``pipeline.auto-watermark-interval`` in milliseconds."""
        self._env._set(k.AUTO_WATERMARK_INTERVAL.name, f"{millis(interval, 'set_auto_watermark_interval')} ms")
        return self

    def get_auto_watermark_interval(self) -> int:
        return _to_millis(self._env.config.get(k.AUTO_WATERMARK_INTERVAL))

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        self._env.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        self._env.set_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._env.get_max_parallelism()

    def set_global_job_parameters(self, global_job_parameters_map: Mapping[str, str]) -> NoReturn:
        raise NotSupportedError.pyflink("ExecutionConfig.set_global_job_parameters()",
                                        "pass the values to your functions' constructors (they travel with the job)")


class CheckpointConfig:
    """What ``env.get_checkpoint_config()`` returns (PyFlink's ``CheckpointConfig``): setters of
    the ``execution.checkpointing.*`` keys, times in milliseconds."""

    def __init__(self, env: Environment) -> None:
        self._env = env

    def _get(self, key: k.Key[Any]) -> Any:
        return self._env.config.get(key)

    def is_checkpointing_enabled(self) -> bool:
        return self._get(k.CHECKPOINT_INTERVAL) is not None

    def set_checkpoint_interval(self, checkpoint_interval: int) -> CheckpointConfig:
        self._env.enable_checkpointing(checkpoint_interval)
        return self

    def get_checkpoint_interval(self) -> int:
        return _to_millis(self._get(k.CHECKPOINT_INTERVAL))

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> CheckpointConfig:
        check_mode(checkpointing_mode, "CheckpointConfig.set_checkpointing_mode()")
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode.EXACTLY_ONCE

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> CheckpointConfig:
        timeout = millis(checkpoint_timeout, "set_checkpoint_timeout", minimum=1)
        self._env._set(k.CHECKPOINT_TIMEOUT.name, f"{timeout} ms")
        return self

    def get_checkpoint_timeout(self) -> int:
        return _to_millis(self._get(k.CHECKPOINT_TIMEOUT))

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> CheckpointConfig:
        pause = millis(min_pause_between_checkpoints, "set_min_pause_between_checkpoints")
        self._env._set(k.CHECKPOINT_MIN_PAUSE.name, f"{pause} ms")
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return _to_millis(self._get(k.CHECKPOINT_MIN_PAUSE))

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> CheckpointConfig:
        if max_concurrent_checkpoints != 1:
            raise NotSupportedError.pyflink(
                "CheckpointConfig.set_max_concurrent_checkpoints()",
                "accelflow takes one checkpoint at a time (a checkpoint in flight delays the next): pass 1, "
                "or shorten execution.checkpointing.interval")
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return 1

    def set_externalized_checkpoint_retention(self, retention: ExternalizedCheckpointRetention) -> CheckpointConfig:
        if not isinstance(retention, Enum) or retention.name not in ExternalizedCheckpointRetention.__members__:
            raise ConfigError(f"expected an ExternalizedCheckpointRetention, got {retention!r}",
                              key="CheckpointConfig.set_externalized_checkpoint_retention()")
        self._env._set(k.CHECKPOINT_RETENTION.name, retention.name)
        return self

    enable_externalized_checkpoints = set_externalized_checkpoint_retention  # PyFlink 1.x's name

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        """``execution.checkpointing.dir``: a local path or an fsspec URL."""
        self._env._set(k.CHECKPOINT_DIR.name, checkpoint_path)
        return self

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return False

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        if enabled:
            raise NotSupportedError.pyflink(
                "CheckpointConfig.enable_unaligned_checkpoints()",
                "accelflow's checkpoints are aligned; lower execution.buffer-timeout to let barriers through sooner")
        return self


def check_mode(mode: Any, where: str) -> None:
    """Accept a :class:`CheckpointingMode` (or ``None``), whatever its module."""
    if mode is not None and getattr(mode, "name", None) not in CheckpointingMode.__members__:
        raise ConfigError(f"expected CheckpointingMode.EXACTLY_ONCE or AT_LEAST_ONCE, got {mode!r}", key=where)


class CollectedRecords(list[Any]):
    """The records of ``execute_and_collect()``: a list, and PyFlink's closeable iterator (``with
    ds.execute_and_collect() as results: for r in results: ...``). The job has finished when it
    is returned, so ``close()`` has nothing to release."""

    def __enter__(self) -> CollectedRecords:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """PyFlink's ``CloseableIterator.close()``: nothing to do, the job has finished."""


__all__ = [
    "CheckpointConfig", "CheckpointingMode", "CollectedRecords", "Configuration", "ExecutionConfig",
    "ExternalizedCheckpointRetention", "RuntimeExecutionMode", "check_mode", "millis",
]
