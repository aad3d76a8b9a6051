"""One warning format: ``accelflow: warning: <message>``, from warn() and from log records."""

from __future__ import annotations

import doctest
import logging

import pytest

from accelflow import _warn
from accelflow._warn import MessageFormatter, warn


def test_warn_writes_one_prefixed_line_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    warn("resource 'gpu' has no kubernetes.config-key")

    out, err = capsys.readouterr()
    assert (out, err) == ("", "accelflow: warning: resource 'gpu' has no kubernetes.config-key\n")


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("accelflow.deploy._requests", level, __file__, 1, message, None, None)


def test_log_warnings_look_like_warn() -> None:
    formatter = MessageFormatter()

    assert formatter.format(_record(logging.WARNING, "no key")) == "accelflow: warning: no key"
    assert formatter.format(_record(logging.ERROR, "broken")) == "accelflow: error: broken"
    assert formatter.format(_record(logging.DEBUG, "detail")) == (
        "accelflow: debug: accelflow.deploy._requests: detail"
    )


def test_docstring_examples() -> None:
    result = doctest.testmod(_warn)
    assert result.attempted > 0 and result.failed == 0
