"""`--gpu local` beyond NVML: Apple Silicon (sysctl) and AMD / Intel GPUs on Linux (sysfs).

Each source is read through a small function that tests replace with recorded outputs: `sysctl` on
macOS (`machdep.cpu.brand_string`, `hw.memsize`, `iogpu.wired_limit_mb`) and the amdgpu / xe driver's
files under /sys/class/drm/card*/device (`mem_info_vram_total`, `mem_info_vram_used`,
`mem_info_gtt_total`, `product_name`). A device the database knows keeps its bandwidth and compute
figures; a unified one (Apple, an AMD APU) is recognised as such, so its memory is one pool.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gemma_fit.hardware.spec import GIB, GPUSpec, with_rated_figures

Sysctl = Callable[[str], str | None]
AMD, INTEL = "0x1002", "0x8086"


def _sysctl(name: str) -> str | None:
    try:
        done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def apple_gpu(known: dict[str, GPUSpec], sysctl: Sysctl = _sysctl) -> tuple[GPUSpec | None, str]:
    """This Mac's GPU: the chip (M4 Max) and memory size (hw.memsize) name a database entry
    (m4-max-64gb); iogpu.wired_limit_mb, when set, is the GPU's ceiling instead of Metal's default."""
    brand = sysctl("machdep.cpu.brand_string") or ""
    memsize = sysctl("hw.memsize")
    m = re.match(r"Apple (M\d+)(?: (Pro|Max|Ultra))?", brand)
    if m is None or memsize is None or not memsize.isdigit():
        return None, f"not Apple Silicon (sysctl machdep.cpu.brand_string: {brand or 'none'})"
    gib = round(int(memsize) / GIB)
    chip = "-".join(p.lower() for p in m.groups() if p)
    gpu = known.get(f"{chip}-{gib}gb")
    if gpu is None:
        sizes = sorted(int(k.rsplit("-", 1)[1][:-2]) for k in known if re.fullmatch(rf"{chip}-\d+gb", k))
        return None, f"{brand} with {gib} GB is not in the database (it has {chip} with {sizes or 'no'} GB)"
    limit = sysctl("iogpu.wired_limit_mb")
    note = f"{gpu.name}: sysctl reports {brand}, {gib} GB"
    if limit and limit.isdigit() and int(limit) > 0:
        gpu = replace(gpu, usable_memory_bytes=min(int(limit) * 1024**2, gpu.memory_bytes))
        note += f"; iogpu.wired_limit_mb={limit} sets the GPU limit"
    return replace(gpu, id="local0", source="sysctl (this machine)"), note


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _number(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text is not None and text.isdigit() else None


def sysfs_gpus(known_by_name: Callable[[str, int | None], GPUSpec | None], ram_total: int,
               drm: Path = Path("/sys/class/drm")) -> tuple[list[GPUSpec], list[str]]:
    """AMD and Intel GPUs the amdgpu / xe drivers expose, with their free memory as the capacity. An
    APU (a small VRAM carve-out beside a larger GTT) is unified: its GTT is the GPU's ceiling and the
    system's RAM (`ram_total`) its memory."""
    gpus: list[GPUSpec] = []
    notes: list[str] = []
    for card in sorted(drm.glob("card[0-9]*")):
        dev = card / "device"
        vendor = _read(dev / "vendor")
        total, used = _number(dev / "mem_info_vram_total"), _number(dev / "mem_info_vram_used")
        if vendor not in (AMD, INTEL) or total is None or used is None or "-" in card.name:
            continue
        name = _read(dev / "product_name") or f"{'AMD' if vendor == AMD else 'Intel'} GPU {_read(dev / 'device')}"
        gtt = _number(dev / "mem_info_gtt_total")
        unified = gtt is not None and total < 4 * GIB and gtt > total  # an APU: carve-out plus GTT
        base = known_by_name(name, None if unified else total)
        free = (gtt if unified and gtt else total) - used
        spec = GPUSpec(
            id=f"local{len(gpus)}", name=name, vendor="amd" if vendor == AMD else "intel",
            backend="vulkan", memory_bytes=ram_total if unified else total,
            usable_memory_bytes=max(0, free), unified_memory=unified,
            memory_bandwidth_gbps=None, fp16_tensor_tflops=None, arch="unknown",
            compute_capability=None, pcie_gen=None, pcie_lanes=None, nvlink_gbps=None, tdp_w=None,
            source="sysfs (this machine)", unified_platform="amd-uma" if unified else None,
        )
        if base is not None:
            spec = replace(with_rated_figures(spec, base), backend=base.backend)
        gpus.append(spec)
        kind = f"unified, GTT {gtt / GIB:.1f} GiB" if unified and gtt else f"{total / GIB:.1f} GiB VRAM"
        notes.append(f"{name} ({card.name}): {kind}, {used / GIB:.1f} GiB in use (sysfs)")
    return gpus, notes
