"""This machine's CPU, for --gpu cpu and --gpu local: its name, instruction set and core counts.

Linux reads /proc/cpuinfo (x86 `model name` and `flags`; ARM `Features`, where `sve` and `asimd`
say which kernels ggml-cpu runs) and counts physical cores by (`physical id`, `core id`); macOS asks
sysctl (`machdep.cpu.brand_string`, `hw.physicalcpu`, `hw.perflevel0.physicalcpu` for the P-cores). The
cores' maximum clock comes from cpufreq (Linux) or the database entry of the CPU's name.
Tests pass recorded outputs to the pure parsers.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gemma_fit.hardware.probe_other import Sysctl, _sysctl
from gemma_fit.hardware.spec import CPUSpec

FindCPU = Callable[[str], CPUSpec | None]


def isa_from_flags(flags: set[str], arm: bool) -> str:
    """The widest SIMD ggml-cpu uses, from the kernel's CPU flags."""
    if arm:
        return "sve" if "sve" in flags else "neon"
    if "amx_tile" in flags and "amx_int8" in flags:
        return "amx"
    return "avx512" if "avx512f" in flags else "avx2"


def _field(block: str, name: str) -> str | None:
    m = re.search(rf"^{name}\s*:\s*(.*)$", block, re.MULTILINE)
    return m.group(1).strip() if m else None


def cpu_from_cpuinfo(text: str, machine: str = "x86_64") -> CPUSpec | None:
    """The CPU /proc/cpuinfo describes; None when it names no processor."""
    blocks = [b for b in text.split("\n\n") if _field(b, "processor") is not None]
    if not blocks:
        return None
    first = blocks[0]
    arm = machine.lower() in ("aarch64", "arm64") or _field(first, "Features") is not None
    flags = set((_field(first, "Features" if arm else "flags") or "").split())
    name = _field(first, "model name") or _field(text, "Model") or _field(text, "Hardware") or f"{machine} CPU"
    cores = {(_field(b, "physical id"), _field(b, "core id")) for b in blocks}
    physical = len(cores) if all(c != (None, None) for c in cores) else len(blocks)
    threads = len(blocks)
    packages = {_field(b, "physical id") for b in blocks} - {None}
    return CPUSpec(re.sub(r"\s+", " ", name), "arm" if arm else "x86", isa_from_flags(flags, arm),
                   cores=physical, threads=threads, source="/proc/cpuinfo",
                   dotprod=not arm or "asimddp" in flags,  # the kernel's name for the dot-product extension
                   sockets=max(1, len(packages)))


def cpu_from_sysctl(sysctl: Sysctl = _sysctl) -> CPUSpec | None:
    """A Mac's CPU: Apple Silicon runs NEON kernels; llama.cpp's default threads are the P-cores."""
    brand = sysctl("machdep.cpu.brand_string")
    cores, threads = sysctl("hw.physicalcpu"), sysctl("hw.logicalcpu")
    if not brand or not cores or not cores.isdigit():
        return None
    perf = sysctl("hw.perflevel0.physicalcpu")
    arm = brand.startswith("Apple")
    return CPUSpec(brand, "arm" if arm else "x86", "neon" if arm else "avx2", cores=int(cores),
                   threads=int(threads) if threads and threads.isdigit() else int(cores),
                   performance_cores=int(perf) if perf and perf.isdigit() and arm else None, source="sysctl")


def with_database(cpu: CPUSpec, find: FindCPU | None) -> CPUSpec:
    """The probed CPU with the memory system of the database's entry of that name, where it has one:
    the probe knows the cores and kernels, not how the memory is populated."""
    known = find(cpu.name) if find else None
    if known is None:
        return cpu
    return replace(cpu, performance_cores=cpu.performance_cores or known.performance_cores,
                   ram_bandwidth_gbps=known.ram_bandwidth_gbps, memory=known.memory, id=known.id,
                   boost_clock_ghz=known.boost_clock_ghz or cpu.boost_clock_ghz,
                   source=f"{cpu.source}; memory from the database entry for {known.name}")


MAX_CPUFREQ_FILES = 4096  # a bound on what the probe reads, whatever the machine


def max_clock_ghz(root: Path = Path("/sys/devices/system/cpu")) -> float | None:
    """The fastest core's maximum clock the kernel's cpufreq states (cpuinfo_max_freq, kHz), or None where it
    states none (most virtual machines): a hybrid chip's performance cores clock highest."""
    best = 0
    try:
        for i, path in enumerate(sorted(root.glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq"))):
            if i >= MAX_CPUFREQ_FILES:
                break
            text = path.read_text(encoding="ascii", errors="replace")[:32].strip()
            if text.isascii() and text.isdigit() and 100_000 <= int(text) <= 10_000_000:  # 0.1 to 10 GHz
                best = max(best, int(text))
    except OSError:
        return None
    return round(best / 1e6, 3) if best else None


def local_cpu(find: FindCPU | None = None, cpuinfo: Path = Path("/proc/cpuinfo"),
              sysctl: Sysctl = _sysctl, cpufreq: Path = Path("/sys/devices/system/cpu")) -> CPUSpec | None:
    """This machine's CPU, or None where neither source answers."""
    cpu = None
    if platform.system() == "Darwin":
        cpu = cpu_from_sysctl(sysctl)
    else:
        try:
            cpu = cpu_from_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace")[:4_000_000],
                                   platform.machine())
        except OSError:
            cpu = None
        if cpu is not None:
            cpu = replace(cpu, boost_clock_ghz=max_clock_ghz(cpufreq))
    return with_database(cpu, find) if cpu else None
