"""Sources and sinks: the built-in sources of what the job script holds (a collection, a
sequence, NumPy arrays) and of IDX files, ``sink_to_file``'s one-file sink, exactly-once part
files (:mod:`.files`) and Kafka
(:mod:`.kafka`, extra ``accelflow[kafka]``), and PyFlink's file connector builders
(``FileSource``, ``FileSink``, ``Encoder``...: ``FileSink.for_row_format(...).build()`` is a
:class:`.files.FileSink`). Their contracts (``Source``, ``Sink``, splits)
are in :mod:`accelflow.dataflow`; reading file formats is :mod:`accelflow.io`'s.

The names load on first use (PEP 562): ``import accelflow.connectors.kafka`` does not import
NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports

if TYPE_CHECKING:
    from accelflow.connectors._arrays import ArraySource
    from accelflow.connectors._idx import IdxSource
    from accelflow.connectors._pyflink import (
        Encoder, FileSink, FileSource, NumberSequenceSource, OutputFileConfig, RollingPolicy, StreamFormat,
        TextLineSource, writes_text,
    )
    from accelflow.connectors._single_file import SingleFileSink
    from accelflow.connectors._sources import CollectionSource, SequenceSource

#: module (relative) -> the names it provides, imported on first use
_LAZY: dict[str, tuple[str, ...]] = {
    "._arrays": ("ArraySource",),
    "._idx": ("IdxSource",),
    # PyFlink's connector names (pyflink.datastream.connectors.file_system, .number_seq)
    "._pyflink": ("Encoder", "FileSink", "FileSource", "NumberSequenceSource", "OutputFileConfig", "RollingPolicy",
                  "StreamFormat", "TextLineSource", "writes_text"),
    "._single_file": ("SingleFileSink",),
    "._sources": ("CollectionSource", "SequenceSource"),
}

__all__ = [
    "ArraySource", "CollectionSource", "Encoder", "FileSink", "FileSource", "IdxSource", "NumberSequenceSource",
    "OutputFileConfig", "RollingPolicy", "SequenceSource", "SingleFileSink", "StreamFormat", "TextLineSource",
    "writes_text",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
