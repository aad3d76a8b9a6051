"""NVIDIA's Xid catalogue, and what each Xid means for a device and the subtasks on it.

The table is NVIDIA's Xid catalogue for Ampere and newer GPUs ("Analyzing Xid Errors with the
Xid Catalog", docs.nvidia.com/deploy/xid-errors), one row per Xid the catalogue describes
(the ones it marks "Unused" are left out): the driver's mnemonic, NVIDIA's description and
NVIDIA's *immediate action* ("resolution bucket"). Each Xid gets one of three classes from it:

* ``application`` (NVIDIA: ``RESTART_APP``; a bad kernel, not a bad card): the subtasks on the
  device fail and restart in place; the device stays. The six Xids NVIDIA's Kubernetes device
  plugin ignores as application errors are application here too, whatever their bucket:
  13, 31, 43, 45 (it follows another Xid, which decides for the device), 68 and 109 (the
  catalogue now says ``RESET_GPU`` for 109; a context switch timeout is mostly a kernel that
  does not yield, and should it come from the card, it comes back and the card's other
  faults quarantine it).
* ``informational`` (NVIDIA: ``IGNORE``, and the notices 154 and 162-165): recorded in the
  device's Xid history, nothing else.
* ``hardware`` (every other bucket: ``RESET_GPU``, ``RESTART_BM``, ``RESTART_VM``,
  ``WORKFLOW_XID_48``, the NVLink workflows, ``CHECK_MECHANICALS``, ...): the device is
  quarantined, its subtasks fail and restart on healthy devices; it rejoins after a reset.

An Xid that is not in the table is **hardware** when it comes from the driver (as the device
plugin treats every Xid outside its ignore list): a new driver's new Xid is most likely a new
hardware or firmware fault, and trusting a broken card costs wrong results and crashes while
quarantining a good one costs only its capacity until its probes pass after a reset. A *drill*
(``accelflow cluster inject-fault --xid``) must name a catalogued Xid: :func:`drill_xid`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from accelflow._errors import ConfigError
from accelflow.resources import Fault

XidClass = Literal["application", "hardware", "informational"]

#: the Kubernetes device plugin's application Xids (its hard-coded ignore list)
DEVICE_PLUGIN_APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_APPLICATION_BUCKETS = frozenset({"RESTART_APP"})
_INFORMATIONAL_BUCKETS = frozenset({"IGNORE", "XID_154", "NOTICE"})


@dataclass(frozen=True, slots=True)
class Xid:
    """One Xid as NVIDIA's catalogue describes it, and its class.

    Example:
        >>> classify(79).kind, classify(79).description
        ('hardware', 'GPU has fallen off the bus')
        >>> classify(13).kind
        'application'
    """

    code: int
    mnemonic: str
    description: str
    action: str
    kind: XidClass
    catalogued: bool = True

    def __str__(self) -> str:
        return f"Xid {self.code} ({self.description})"


def _kind(code: int, action: str) -> XidClass:
    if code in DEVICE_PLUGIN_APPLICATION_XIDS or action in _APPLICATION_BUCKETS:
        return "application"
    if action in _INFORMATIONAL_BUCKETS:
        return "informational"
    return "hardware"


def _copy_engines(first: int, codes: range) -> list[tuple[int, str, str, str]]:
    return [(c, f"ROBUST_CHANNEL_CE{n}_ERROR", f"CE{n}: Unknown Error", "RESTART_APP")
            for n, c in enumerate(codes, first)]


def _engines(name: str, first: int, codes: range, description: str = "{name}{n} Error") -> list[tuple[int, str, str, str]]:
    return [(c, f"ROBUST_CHANNEL_{name}{n}_ERROR", description.format(name=name, n=n), "RESTART_APP")
            for n, c in enumerate(codes, first)]


_NVLINK5 = "WORKFLOW_NVLINK5_ERR"
_ROWS: list[tuple[int, str, str, str]] = [
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    (11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP"),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP"),
    (25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP"),
    (37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE"),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE"),
    *((c, f"ROBUST_CHANNEL_CE{c - 39}_ERROR", "Copy Engine Exception", "RESTART_APP") for c in range(39, 42)),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE"),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48"),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board",
     "CHECK_MECHANICALS"),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP"),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"),
    (66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE"),
    (67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE"),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
    *_copy_engines(3, range(70, 73)),
    (74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    *_copy_engines(6, range(75, 78)),
    (78, "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP"),
    (82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP"),
    *_engines("NVDEC", 1, range(83, 85)),
    (85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP"),
    (86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP"),
    *_engines("NVDEC", 3, range(88, 90)),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
    *_engines("NVDEC", 5, range(96, 99)),
    *_engines("NVJPG", 1, range(99, 106)),
    (106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE"),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU"),
    (110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU"),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU"),
    (120, "GSP_ERROR", "GSP Error", "RESET_GPU"),
    (121, "C2C_ERROR", "C2C Error", "IGNORE"),
    *_copy_engines(10, range(126, 136)),
    (136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU"),
    (137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE"),
    (139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU"),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE"),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT"),
    (143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU"),
    (144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", _NVLINK5),
    (145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", _NVLINK5),
    (146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", _NVLINK5),
    (147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", _NVLINK5),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", _NVLINK5),
    (149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", _NVLINK5),
    (150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", _NVLINK5),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM"),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE"),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154"),
    (155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU"),
    (156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU"),
    (157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE"),
    (158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU"),
    (159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM"),
    (160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE"),
    (161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE"),
    (162, "PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "NOTICE"),
    (163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "NOTICE"),
    (164, "PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "NOTICE"),
    (165, "PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "NOTICE"),
    (166, "NVLINK_SECURE_CRYPTO_ERR", "NVLink traffic before the link was set up for encryption", ""),
    (167, "PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", ""),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in the write-protected region", ""),
    (169, "SEC2_HALT_ERROR", "Internal micro-controller halt", ""),
    (170, "NVLINK_SECURE_OTHER", "Interrupt seen in confidential computing mode", ""),
    (171, "UNCORRECTABLE_DRAM_ERROR", "Uncorrectable DRAM error (details of an Xid 48)", ""),
    (172, "UNCORRECTABLE_SRAM_ERROR", "Uncorrectable SRAM error (details of an Xid 48)", ""),
]

CATALOGUE: Mapping[int, Xid] = {
    code: Xid(code, mnemonic, description, action, _kind(code, action))
    for code, mnemonic, description, action in _ROWS
}
"""Every catalogued Xid by code."""


def classify(code: int) -> Xid:
    """The Xid ``code`` from the driver, classified; one not in the catalogue is hardware.

    Example:
        >>> classify(999)
        Xid(code=999, mnemonic='UNKNOWN', description='not in the Xid catalogue accelflow knows', \
action='', kind='hardware', catalogued=False)
    """
    known = CATALOGUE.get(code)
    if known is not None:
        return known
    return Xid(code, "UNKNOWN", "not in the Xid catalogue accelflow knows", "", "hardware", False)


def drill_xid(value: object, *, key: str = "--xid") -> Xid:
    """The Xid a drill injects: it must be catalogued (a drill rehearses a known fault).

    Example:
        >>> drill_xid("79").kind
        'hardware'

    Raises:
        ConfigError: not a number, or not in the catalogue; names ``key`` and lists the known
            Xids by class.
    """
    text = str(value).strip()
    code = int(text) if text.isdigit() else None
    if code is not None and code in CATALOGUE:
        return CATALOGUE[code]
    what = f"{value!r} is not an Xid number" if code is None else f"Xid {code} is not in NVIDIA's Xid catalogue"
    lists = "; ".join(
        f"{kind}: {_ranges([x.code for x in CATALOGUE.values() if x.kind == kind])}"
        for kind in ("hardware", "application", "informational")
    )
    raise ConfigError(f"{what}; a drill injects a known Xid ({lists})", key=key)


def _ranges(codes: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``'1-3, 5'``."""
    runs: list[list[int]] = []
    for code in sorted(codes):
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def xid_fault(code: int) -> Fault:
    """The :class:`~accelflow.resources.Fault` an Xid from the driver is for a device.

    Example:
        >>> xid_fault(79)
        Fault(reason='Xid 79 (GPU has fallen off the bus)', kind='hardware', xid=79, \
fail_subtasks=True, needs_reset=True)
    """
    xid = classify(code)
    return Fault(str(xid), xid.kind, code)


DOUBLE_BIT_ECC = Fault("double-bit ECC error (uncorrectable memory error)", "hardware")
"""NVML's double-bit ECC event: a hardware fault, as Xid 48 (which usually comes with it)."""
