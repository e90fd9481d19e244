"""The CPU side of decode: which CPU family runs the CPU layers, and the seconds they take per token."""

from __future__ import annotations

from gemma_fit.hardware.select import Hardware
from gemma_fit.speed.calibration import cpu_decode_efficiency

ARM_HINTS = ("arm", "aarch64", "graviton", "ampere", "apple", "snapdragon", "raspberry", "cortex", "neoverse",
             "grace", "jetson")


def cpu_family(hardware: Hardware) -> str:
    """x86 or arm: the CPU that runs the CPU layers (a unified device's own CPU, or the machine's)."""
    for g in hardware.gpus:
        if g.unified_memory:
            return "x86" if g.unified_platform == "amd-uma" else "arm"
    cpu = (hardware.machine.cpu if hardware.machine else None) or ""
    return "arm" if any(h in cpu.lower() for h in ARM_HINTS) else "x86"


def cpu_decode_s(read_bytes: float, ram_bw: float, family: str = "x86") -> float:
    cpu_eff, _ = cpu_decode_efficiency(family)
    return read_bytes / (ram_bw * 1e9 * cpu_eff)
