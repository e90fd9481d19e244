"""Unified memory: one physical memory that the GPU side and the host side of a process both draw from.

On Apple Silicon, Jetson, Strix Halo and DGX Spark the "GPU memory" and the "host RAM" of a llama.cpp
process are the same DRAM. What the process needs is the GPU side's buffers (model, KV, compute,
runtime) plus the host side's (weights left on the CPU, host compute buffer, outputs), and that sum
must fit in what the platform leaves to one process (the physical memory less what the OS and
firmware keep: model_db/llamacpp/unified_memory.yaml). Inside that pool the GPU side has its own
ceiling: macOS's Metal working-set limit, Linux's GTT limit for an AMD APU; the GPU spec's
usable_memory_bytes holds it. Both are checked; the verdict follows whichever binds.
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.hardware.spec import GPUSpec

GIB = 1024**3
GENERIC = "generic"  # a unified device whose platform is not named (a spec in a machine file)


@record
class Platform:
    """What a unified-memory platform keeps for itself and how its GPU ceiling is raised."""

    id: str
    name: str
    os_sees_usable: bool  # the OS sees the entry's usable memory (carve-outs taken), not the physical
    reserve_bytes: int  # of what the OS sees, what a model process cannot have (OS, services, desktop)
    reserve_measured: bool  # False: a budget, said so in every answer
    gpu_ceiling_usable: bool  # the GPU side stops at the entry's usable memory (else: the whole pool)
    gpu_limit: str  # what sets the GPU side's ceiling, in words
    lever: str  # how to raise that ceiling ("" when it is the whole pool); {mib} / {pages} for the value
    sources: tuple[str, ...]
    weights_mapped: bool = False  # the GPU uses the mapped file's pages in place (Metal): weights counted once
    fit_sees_working_set: bool = False  # the backend reports the GPU limit as its total (Metal); llama.cpp fits to it

    def lever_for(self, need_bytes: int) -> str:
        """The setting that raises the GPU ceiling to `need_bytes`."""
        mib = -(-need_bytes // 1024**2)
        return self.lever.format(mib=mib, pages=-(-need_bytes // 4096))


@record
class UnifiedPool:
    """Everything the process needs from the one memory, against what it may have."""

    platform: Platform
    capacity_bytes: int  # physical memory less the platform's reserve
    gpu_limit_bytes: int  # the GPU side's ceiling inside the pool
    gpu_bytes: int  # GPU side: model, KV, compute and runtime buffers
    host_bytes: int  # host side: weights left on the CPU, host compute buffer, outputs
    shared_bytes: int = 0  # mapped weights both sides count (one set of pages where the GPU maps the file)

    @property
    def total_bytes(self) -> int:
        return self.gpu_bytes + self.host_bytes - self.shared_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.total_bytes

    @property
    def gpu_headroom_bytes(self) -> int:
        return self.gpu_limit_bytes - self.gpu_bytes


@cache
def _platforms() -> dict[str, Platform]:
    data = read_packaged_yaml("llamacpp/unified_memory.yaml")["platforms"]
    return {pid: Platform(pid, p["name"], p["os_sees"] == "usable", round(float(p["reserve_gib"]) * GIB),
                          bool(p["measured"]), p["gpu_ceiling"] == "usable", p["gpu_limit"], p.get("lever", ""),
                          tuple(p["sources"]), bool(p.get("weights_mapped", False)),
                          bool(p.get("fit_sees_working_set", False)))
            for pid, p in data.items()}


def platform(gpu: GPUSpec) -> Platform | None:
    """The unified-memory platform of a GPU; None for a GPU with memory of its own."""
    if not gpu.unified_memory:
        return None
    return _platforms()[gpu.unified_platform or GENERIC]


def pool_capacity(gpu: GPUSpec) -> int:
    """What one process may have of a unified device's physical memory."""
    p = platform(gpu)
    assert p is not None, gpu.id
    seen = gpu.usable_memory_bytes if p.os_sees_usable else gpu.memory_bytes
    return max(0, seen - p.reserve_bytes)


def unified_device(devices: tuple[GPUSpec, ...]) -> GPUSpec | None:
    """The one unified-memory device of a machine (llama.cpp sees one such GPU), or None."""
    return devices[0] if len(devices) == 1 and devices[0].unified_memory else None


def gpu_ceiling(gpu: GPUSpec) -> int:
    """The GPU side's ceiling: its own limit where the platform has one, never more than the pool."""
    p = platform(gpu)
    assert p is not None, gpu.id
    pool = pool_capacity(gpu)
    return min(gpu.usable_memory_bytes, pool) if p.gpu_ceiling_usable else pool


def mapped_once_bytes(p: Platform, gpu_weights: int, host_weights: int, file_weights: int, copied: bool) -> int:
    """The weight bytes both sides count that are one set of pages: where the GPU maps the model file in place,
    the two sides' mapped spans overlap in the file, so together they hold at most its tensor data. `copied`:
    tensor overrides put weights in buffers of their own (a real copy, as --no-mmap would)."""
    if not p.weights_mapped or copied:
        return 0
    return max(0, gpu_weights + host_weights - file_weights)


def fit_view_extra_bytes(devices: tuple[GPUSpec, ...]) -> int:
    """How much more memory llama.cpp's fit sees on a unified device than the ceiling the estimate checks: Metal
    reports its working-set limit as the device's total, even where RAM less the OS's share is lower."""
    u = unified_device(devices)
    p = platform(u) if u is not None else None
    if u is None or p is None or not p.fit_sees_working_set:
        return 0
    return max(0, u.usable_memory_bytes - gpu_ceiling(u))
