"""CUDA_VISIBLE_DEVICES restricts the universe, following CUDA's rules."""

from __future__ import annotations

import logging

import pytest

from accelflow.resources.gpu import GPUDevice
from accelflow.resources.gpu._visible import parse_visible_devices, restrict_to_visible

DEVICES = [
    GPUDevice(index="0", uuid="GPU-aaaa-0"),
    GPUDevice(index="1", uuid="GPU-bbbb-1"),
    GPUDevice(index="2", uuid="GPU-bbbc-2"),
    GPUDevice(index="3:0", uuid="MIG-x", parent_index="3"),
    GPUDevice(index="3:1", uuid="MIG-y", parent_index="3"),
]


def visible(value: str | None) -> list[str]:
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    return [d.index for d in restrict_to_visible(DEVICES, env)]


def test_unset_means_every_device_and_empty_means_none() -> None:
    assert visible(None) == ["0", "1", "2", "3:0", "3:1"]
    assert visible("") == [] and visible(" , ") == []
    assert (
        parse_visible_devices({}) is None
        and parse_visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2,0", ["2", "0"]),
        ("1,1", ["1"]),
        ("GPU-bbbb-1", ["1"]),
        ("GPU-aaaa", ["0"]),  # a unique UUID prefix, as CUDA accepts
        ("GPU-bbb", []),  # ambiguous prefix: names no device
        ("MIG-y", ["3:1"]),
        ("3", ["3:0", "3:1"]),  # a GPU with MIG on stands for its units
        ("-1", []),
        ("0,7,1", ["0"]),  # CUDA stops at the first entry that names no device
    ],
)
def test_entries(value: str, expected: list[str]) -> None:
    assert visible(value) == expected


def test_an_entry_naming_no_device_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="accelflow.resources.gpu"):
        visible("0,7,1")
    assert "'7' names no GPU" in caplog.text
