"""PyFlink's connector names onto accelflow's connectors: ``NumberSequenceSource``
(``pyflink.datastream.connectors.number_seq``: accelflow's ``SequenceSource``, ``start..end``
inclusive), and the file connector (``pyflink.datastream.connectors.file_system``) with
``Encoder`` (``pyflink.common``), built as PyFlink builds them:

- ``FileSink.for_row_format(path, Encoder.simple_string_encoder())...build()`` is an
  :class:`accelflow.connectors.files.FileSink` (exactly-once part files) writing typed
  records as PyFlink does; the parts lie in ``path`` itself (Flink's default puts them in
  ``yyyy-MM-dd--HH`` bucket directories below it).
- ``FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths)
  .process_static_file_set().build()`` reads the lines of the files (directories: their
  files, hidden ones, starting with ``.`` or ``_``, skipped, as Flink), one split per file.

Example:
    >>> sink = FileSink.for_row_format("out", Encoder.simple_string_encoder()) \\
    ...     .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".txt").build()).build()
    >>> sink.suffix
    '.txt'
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from accelflow._errors import ConfigError, NotSupportedError
from accelflow.connectors.files import DEFAULT_ROLLING_SIZE
from accelflow.connectors.files import FileSink as _FileSink
from accelflow.connectors._sources import SequenceSource
from accelflow.dataflow import RuntimeContext, Source

_UTF8 = ("utf-8", "utf8")

#: PyFlink's ``NumberSequenceSource(start, end)``: the integers ``start..end`` inclusive
NumberSequenceSource = SequenceSource



def millis(value: Any, what: str) -> int:
    """``value`` checked as a positive whole number of milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"expected milliseconds as an integer >= 1, got {value!r}", key=what)
    return value


def _check_charset(charset: str, where: str) -> None:
    if str(charset).lower() not in _UTF8:
        raise NotSupportedError.pyflink(where, f"accelflow reads and writes text as UTF-8, got charset {charset!r}: "
                                               "encode the records in a map and write bytes with your own Sink")


class SimpleStringEncoder:
    """Flink's ``SimpleStringEncoder``: a record's ``toString`` per line (a typed record as
    PyFlink writes it, an untyped one as ``str``)."""

    def __call__(self, record: Any) -> str:
        return str(record)


class Encoder:
    """PyFlink's ``Encoder`` factory."""

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> SimpleStringEncoder:
        _check_charset(charset_name, "Encoder.simple_string_encoder()")
        return SimpleStringEncoder()


def writes_text(sink: Any) -> bool:
    """Whether ``sink`` writes records with a ``SimpleStringEncoder`` (records with a declared
    type are turned into PyFlink's text before it)."""
    return isinstance(getattr(sink, "encoder", None), SimpleStringEncoder)


class OutputFileConfig:
    """Part file names: ``<prefix>-<uid>-<subtask>-<n><suffix>``."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = "") -> None:
        self.part_prefix, self.part_suffix = part_prefix, part_suffix

    @staticmethod
    def builder() -> OutputFileConfig.OutputFileConfigBuilder:
        return OutputFileConfig.OutputFileConfigBuilder()

    class OutputFileConfigBuilder:
        def __init__(self) -> None:
            self._config = OutputFileConfig()

        def with_part_prefix(self, prefix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self._config.part_prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self._config.part_suffix = suffix
            return self

        def build(self) -> OutputFileConfig:
            return self._config


class RollingPolicy:
    """When a part file rolls: at ``part_size`` bytes, at a write after ``rollover_interval``
    ms, and at every checkpoint (accelflow's parts always roll there)."""

    def __init__(self, part_size: int, rollover_interval: int | None) -> None:
        self.part_size, self.rollover_interval = part_size, rollover_interval

    @staticmethod
    def default_rolling_policy(part_size: int = DEFAULT_ROLLING_SIZE, rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> RollingPolicy:
        """Flink's default policy. ``inactivity_interval`` is not checked on its own: an idle
        part rolls at the next checkpoint or the end of the job."""
        millis(inactivity_interval, "RollingPolicy.default_rolling_policy(inactivity_interval)")
        return RollingPolicy(part_size, millis(rollover_interval, "RollingPolicy(rollover_interval)"))

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        return RollingPolicy(DEFAULT_ROLLING_SIZE, None)


class FileSink:
    """PyFlink's ``FileSink`` builder; ``build()`` gives accelflow's
    :class:`~accelflow.connectors.files.FileSink`."""

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> FileSink.RowFormatBuilder:
        return FileSink.RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> NoReturn:
        raise NotSupportedError.pyflink("FileSink.for_bulk_format()",
                                        "bulk formats (Parquet, ORC, Avro) need Flink's Java writers: "
                                        "write rows with for_row_format and an encoder, or your own accelflow.Sink")

    class RowFormatBuilder:
        def __init__(self, base_path: str, encoder: Any) -> None:
            if not callable(encoder):
                raise ConfigError(f"expected an Encoder (Encoder.simple_string_encoder()), got {encoder!r}",
                                  key="FileSink.for_row_format(encoder)")
            self._path, self._encoder = base_path, encoder
            self._files, self._rolling = OutputFileConfig(), RollingPolicy.default_rolling_policy()

        def with_output_file_config(self, output_file_config: OutputFileConfig) -> FileSink.RowFormatBuilder:
            self._files = output_file_config
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> FileSink.RowFormatBuilder:
            self._rolling = rolling_policy
            return self

        def with_bucket_assigner(self, bucket_assigner: Any) -> NoReturn:
            raise NotSupportedError.pyflink(
                "FileSink.RowFormatBuilder.with_bucket_assigner()",
                "accelflow writes every part into the base path (no bucket directories): filter the stream "
                "into one sink per bucket to split the output")

        def build(self) -> _FileSink[Any]:
            interval = self._rolling.rollover_interval
            return _FileSink(self._path, prefix=self._files.part_prefix, suffix=self._files.part_suffix,
                             encoder=self._encoder, rolling_size=self._rolling.part_size,
                             rolling_interval=None if interval is None else interval / 1000)


class StreamFormat:
    """PyFlink's ``StreamFormat``: only ``text_line_format`` (one record per line, without
    its line break)."""

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        _check_charset(charset_name, "StreamFormat.text_line_format()")
        return StreamFormat()


class FileSource:
    """PyFlink's ``FileSource`` builder: the lines of a static set of files."""

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSource.FileSourceBuilder:
        if not isinstance(stream_format, StreamFormat):
            raise ConfigError(f"expected StreamFormat.text_line_format(), got {stream_format!r}",
                              key="FileSource.for_record_stream_format(stream_format)")
        return FileSource.FileSourceBuilder(paths)

    class FileSourceBuilder:
        def __init__(self, paths: Sequence[str]) -> None:
            if not paths:
                raise ConfigError("give at least one file or directory", key="FileSource.for_record_stream_format")
            self._paths = [os.fspath(p) for p in paths]

        def process_static_file_set(self) -> FileSource.FileSourceBuilder:
            return self

        def monitor_continuously(self, discovery_interval: Any) -> NoReturn:
            raise NotSupportedError.pyflink(
                "FileSource.FileSourceBuilder.monitor_continuously()",
                "accelflow reads a static file set: run the job again for new files, or feed them through "
                "Kafka (accelflow.connectors.kafka)")

        def build(self) -> TextLineSource:
            return TextLineSource(self._paths)


class TextLineSource(Source[str]):
    """The lines of ``paths`` (files, or directories of files), one split per file: ``(path,
    lines already read)``."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = [os.path.abspath(p) for p in paths]
        missing = [p for p in self.paths if not os.path.exists(p)]
        if missing:
            raise ConfigError(f"no such file or directory: {', '.join(missing)}", key="FileSource(paths)")

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [(path, 0) for path in sorted(_files(self.paths))]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[str]:
        path, skip = split
        with open(path, encoding="utf-8", newline=None) as lines:
            for n, line in enumerate(lines):
                if n >= skip:
                    yield line.rstrip("\n")

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0], split[1] + records_read)


def _files(paths: Sequence[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for directory, subdirectories, names in os.walk(path):
            subdirectories[:] = [d for d in subdirectories if not d.startswith((".", "_"))]
            yield from (os.path.join(directory, n) for n in names if not n.startswith((".", "_")))


__all__ = ["Encoder", "FileSink", "FileSource", "NumberSequenceSource", "OutputFileConfig", "RollingPolicy",
           "SimpleStringEncoder", "StreamFormat", "TextLineSource", "writes_text"]
