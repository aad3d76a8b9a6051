"""Issue 29.1: Xids classified as NVIDIA documents them (its Xid catalogue's immediate action,
and the Kubernetes device plugin's application Xids); unknown Xids from the driver are hardware,
in a drill they are an error listing the known ones."""

from __future__ import annotations

import pytest

from accelflow import ConfigError
from accelflow.resources.gpu._xid import (
    CATALOGUE,
    DEVICE_PLUGIN_APPLICATION_XIDS,
    DOUBLE_BIT_ECC,
    classify,
    drill_xid,
    xid_fault,
)


@pytest.mark.parametrize(("code", "kind", "description"), [
    (79, "hardware", "GPU has fallen off the bus"),
    (48, "hardware", "Double Bit ECC Error"),
    (95, "hardware", "Uncontained memory error"),
    (74, "hardware", "NVLINK Error"),
    (13, "application", "Graphics Engine Exception"),
    (31, "application", "GPU memory page fault"),
    (94, "application", "Contained memory error"),
    (63, "informational", "GPU memory remapping event"),
    (92, "informational", "High single-bit ECC error rate"),
    (154, "informational", "GPU Recovery Action Changed"),
])
def test_xids_are_classified_as_nvidia_documents_them(code: int, kind: str, description: str) -> None:
    xid = classify(code)
    assert (xid.kind, xid.description, xid.catalogued) == (kind, description, True)


def test_the_device_plugins_application_xids_are_application_whatever_their_bucket() -> None:
    assert DEVICE_PLUGIN_APPLICATION_XIDS == {13, 31, 43, 45, 68, 109}
    assert {code: classify(code).action for code in (43, 45, 109)} == {
        43: "IGNORE", 45: "WORKFLOW_XID_45", 109: "RESET_GPU"}
    assert all(classify(code).kind == "application" for code in DEVICE_PLUGIN_APPLICATION_XIDS)


def test_every_class_follows_nvidias_immediate_action() -> None:
    for xid in CATALOGUE.values():
        if xid.code in DEVICE_PLUGIN_APPLICATION_XIDS:
            continue
        expected = {"RESTART_APP": "application", "IGNORE": "informational", "XID_154": "informational",
                    "NOTICE": "informational"}.get(xid.action, "hardware")
        assert xid.kind == expected, xid


def test_an_unknown_xid_from_the_driver_is_hardware() -> None:
    xid = classify(250)
    assert (xid.kind, xid.catalogued) == ("hardware", False)
    assert xid_fault(250).kind == "hardware" and xid_fault(250).needs_reset


def test_faults_carry_the_xid_and_what_it_means() -> None:
    fault = xid_fault(79)
    assert (fault.reason, fault.kind, fault.xid, fault.fail_subtasks) == (
        "Xid 79 (GPU has fallen off the bus)", "hardware", 79, True)
    assert xid_fault(13).kind == "application"
    assert DOUBLE_BIT_ECC.kind == "hardware" and DOUBLE_BIT_ECC.needs_reset


@pytest.mark.parametrize("value", ["250", 1, "79x", "-79"])
def test_a_drill_of_an_unknown_xid_is_an_error_listing_the_known_ones(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        drill_xid(value)
    assert info.value.keys == ("--xid",)
    text = str(info.value)
    assert "a drill injects a known Xid (hardware: 46, 48, 54, 62, 64, 74, 78-79, 95" in text
    assert "application: 8, 11, 13, 25, 31-32" in text and "informational: 37-38" in text


def test_a_drill_of_a_known_xid_is_that_xid() -> None:
    assert drill_xid(" 79 ") is CATALOGUE[79]
    assert drill_xid(13, key="xid").kind == "application"
