"""What this machine has: NVIDIA GPUs through NVML (nvidia-ml-py), RAM, CPU and disks through psutil.

NVML is optional: without the package, the driver or a GPU, `probe()` returns an empty `gpus` list
and says why in `notes`; it never raises. Tests pass a fake module as `nvml=`.
`pcie_gen`/`pcie_width` are the link's maximum in this system (what the slot and card negotiate
under load); the current values, which drop when the GPU idles, are in `pcie_gen_current`/`_width_current`.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from gemma_fit.base.record import record
from gemma_fit.hardware.catalog import GPUSpec, load_gpus, match_device
from gemma_fit.hardware.probe_other import Sysctl, _sysctl, apple_gpu, sysfs_gpus
from gemma_fit.hardware.spec import with_rated_figures

SCHEMA = "gemma-fit.probe/1"


def _import_nvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


MAX_PROBED_GPUS = 256  # past any one machine (an HGX node has 8 or 16)


class _Query:
    """Calls NVML functions, turning NVMLError (and functions an old nvidia-ml-py lacks) into None."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.error: type[BaseException] = getattr(nvml, "NVMLError", Exception)

    def __call__(self, fn_name: str, *args: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        # NVMLError, a library older than the binding (NVMLLibraryMismatchError), bytes the binding decodes strictly
        # (UnicodeDecodeError): what the driver cannot say is unknown
        except Exception:  # noqa: BLE001
            return None


def _processes(q: _Query, handle: Any) -> list[dict[str, Any]]:
    seen: dict[int, dict[str, Any]] = {}
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for proc in q(fn, handle) or []:
            pid = int(getattr(proc, "pid", 0))
            used = getattr(proc, "usedGpuMemory", None)
            seen[pid] = {"pid": pid, "name": _process_name(q, pid),
                         "used_bytes": int(used) if isinstance(used, int) else None}
    return list(seen.values())


def _process_name(q: _Query, pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        name = q("nvmlSystemGetProcessName", pid)
        return _text(name) if name is not None else None


def _clocks_mhz(q: _Query, handle: Any) -> dict[str, int | None]:
    mem = getattr(q.nvml, "NVML_CLOCK_MEM", 2)
    sm = getattr(q.nvml, "NVML_CLOCK_SM", 1)
    return {
        "memory_clock_mhz": q("nvmlDeviceGetClockInfo", handle, mem),
        "memory_clock_max_mhz": q("nvmlDeviceGetMaxClockInfo", handle, mem),
        "sm_clock_max_mhz": q("nvmlDeviceGetMaxClockInfo", handle, sm),
    }


def _pcie(q: _Query, handle: Any) -> dict[str, int | None]:
    return {
        "pcie_gen": q("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_width": q("nvmlDeviceGetMaxPcieLinkWidth", handle),
        "pcie_gen_current": q("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_width_current": q("nvmlDeviceGetCurrPcieLinkWidth", handle),
        "pcie_gen_gpu_max": q("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
    }


def _ecc(q: _Query, handle: Any) -> bool | None:
    mode = q("nvmlDeviceGetEccMode", handle)
    if isinstance(mode, list | tuple) and mode:
        return bool(mode[0])
    return None


MAX_GPU_BYTES = 1 << 44  # 16 TiB: past any GPU made; a driver's 2**64-1 is no figure


@record
class _Memory:
    total: int
    free: int
    used: int


def _memory(info: Any) -> _Memory | None:
    """The driver's memory figures where they hold together (free and used within total), else unknown."""
    try:
        total, free, used = int(info.total), int(info.free), int(info.used)
    except (AttributeError, TypeError, ValueError):
        return None
    if not 0 < total <= MAX_GPU_BYTES or not 0 <= free <= total or not 0 <= used <= total:
        return None
    return _Memory(total, free, used)


def _compute_capability(q: _Query, handle: Any) -> str | None:
    cc = q("nvmlDeviceGetCudaComputeCapability", handle)
    ok = isinstance(cc, list | tuple) and len(cc) == 2 and all(isinstance(v, int) and 0 <= v < 100 for v in cc)
    return f"{cc[0]}.{cc[1]}" if ok else None  # a driver's -1.-1 (unknown) is none


def _probe_gpu(q: _Query, index: int, extra_dirs: tuple[Path, ...]) -> dict[str, Any]:
    handle = q("nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return {"index": index, "name": f"GPU {index} (not accessible)", "total_bytes": None, "free_bytes": None,
                "pcie_gen": None, "pcie_width": None, "matched_id": None, "processes": []}
    name = _text(q("nvmlDeviceGetName", handle) or f"GPU {index}")
    mem = _memory(q("nvmlDeviceGetMemoryInfo", handle))
    total = int(mem.total) if mem is not None else None
    power_mw = q("nvmlDeviceGetEnforcedPowerLimit", handle)
    uuid = q("nvmlDeviceGetUUID", handle)
    gpu: dict[str, Any] = {
        "index": index, "name": name,
        "total_bytes": total,
        "free_bytes": int(mem.free) if mem is not None else None,
        "used_bytes": int(mem.used) if mem is not None else None,
        **_pcie(q, handle),
        "matched_id": match_device(name, total, extra_dirs) if total is not None else None,
        "uuid": _text(uuid) if uuid is not None else None,
        "compute_capability": _compute_capability(q, handle),
        "memory_bus_width_bits": q("nvmlDeviceGetMemoryBusWidth", handle),
        **_clocks_mhz(q, handle),
        "ecc_enabled": _ecc(q, handle),
        "power_limit_w": power_mw / 1000 if isinstance(power_mw, int | float) else None,
        "processes": _processes(q, handle),
    }
    return gpu


def _cuda_version(q: _Query) -> str | None:
    v = q("nvmlSystemGetCudaDriverVersion")
    return f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) else None


def probe_gpus(nvml: ModuleType | None = None, extra_dirs: tuple[Path, ...] = ()) -> dict[str, Any]:
    """NVIDIA GPUs through NVML: {"gpus": [...], "driver_version", "cuda_driver_version", "notes"}."""
    out: dict[str, Any] = {"gpus": [], "driver_version": None, "cuda_driver_version": None, "notes": []}
    nvml = nvml if nvml is not None else _import_nvml()
    if nvml is None:
        out["notes"].append("NVML unavailable: the nvidia-ml-py package is not installed; no GPUs probed")
        return out
    error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error as exc:
        out["notes"].append(f"no NVIDIA driver found (NVML: {exc}); no GPUs probed")
        return out
    try:
        q = _Query(nvml)
        count = q("nvmlDeviceGetCount") or 0
        if not isinstance(count, int) or not 0 <= count <= MAX_PROBED_GPUS:  # a broken driver's 2**32-1
            out["notes"].append(f"NVML reports {count!r} GPUs, more than any machine has: none probed")
            count = 0
        version = q("nvmlSystemGetDriverVersion")
        out["driver_version"] = _text(version) if version is not None else None
        out["cuda_driver_version"] = _cuda_version(q)
        out["gpus"] = [_probe_gpu(q, i, extra_dirs) for i in range(count)]
        if count == 0:
            out["notes"].append("the NVIDIA driver is loaded but reports no GPUs")
    finally:
        with contextlib.suppress(error):
            nvml.nvmlShutdown()
    return out


def _disk_kind(device: str) -> str | None:
    """'nvme', 'hdd' or 'ssd' for a block device, from its name and /sys rotational flag (Linux)."""
    base = Path(device).name
    if base.startswith("nvme"):
        return "nvme"
    for name in (base, base.rstrip("0123456789")):
        flag = Path("/sys/block") / name / "queue" / "rotational"
        if flag.is_file():
            return "hdd" if flag.read_text().strip() == "1" else "ssd"
    return None


# PCIe signalling rate per generation, as /sys/bus/pci/devices/*/current_link_speed prints it.
_GT_PER_S_TO_GEN = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


def _nvme_pcie_gen(device: str, sys_root: Path = Path("/sys")) -> int | None:
    """The PCIe generation an NVMe drive's link runs at (Linux sysfs), or None."""
    name = Path(device).name
    namespace = name.split("p")[0] if "p" in name[4:] else name  # nvme0n1p2 -> nvme0n1
    speed = sys_root / "class" / "block" / namespace / "device" / "device" / "current_link_speed"
    try:
        rate = speed.read_text().split()[0]
    except (OSError, IndexError):
        return None
    return _GT_PER_S_TO_GEN.get(rate)


def storage_class_for(kind: str | None, pcie_gen: int | None) -> tuple[str | None, str]:
    """hardware_db/storage.yaml class for a probed disk, and how it was chosen."""
    if kind == "nvme":
        if pcie_gen is None:
            return "nvme-gen3", "an NVMe drive whose link speed could not be read: Gen3 assumed (the slowest class)"
        gen = min(max(pcie_gen, 3), 5)
        return f"nvme-gen{gen}", f"an NVMe drive on a PCIe {pcie_gen}.0 link"
    if kind == "ssd":
        return "sata-ssd", "a non-rotational drive that is not NVMe: SATA SSD class"
    if kind == "hdd":
        return "hdd", "a rotational drive"
    return None, "the drive could not be identified"


def disk_for_path(path: Path) -> tuple[str | None, str]:
    """The storage class of the drive that holds `path` (the longest mount point above it)."""
    target = str(path.resolve())
    best = None
    for part in psutil.disk_partitions(all=False):
        mount = part.mountpoint.rstrip("/") or "/"
        inside = target == mount or target.startswith(mount + "/") or mount == "/"
        if inside and (best is None or len(mount) > len(best.mountpoint.rstrip("/") or "/")):
            best = part
    if best is None:
        return None, f"no drive found for {target}"
    kind = _disk_kind(best.device)
    storage, how = storage_class_for(kind, _nvme_pcie_gen(best.device) if kind == "nvme" else None)
    return storage, f"{best.device} ({how})"


def probe_disks() -> list[dict[str, Any]]:
    disks = []
    for part in psutil.disk_partitions(all=False):
        try:
            usage = psutil.disk_usage(part.mountpoint)
        except (PermissionError, OSError):
            continue
        disks.append({"device": part.device, "mountpoint": part.mountpoint, "fstype": part.fstype,
                      "total_bytes": int(usage.total), "free_bytes": int(usage.free), "kind": _disk_kind(part.device)})
    return disks


def probe_system() -> dict[str, Any]:
    """RAM, CPU and disks through psutil."""
    vm = psutil.virtual_memory()
    freq = psutil.cpu_freq()
    return {
        "ram_total_bytes": int(vm.total),
        "ram_available_bytes": int(vm.available),
        "cpu_count": psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_freq_mhz": round(freq.current, 1) if freq else None,
        "cpu_freq_max_mhz": round(freq.max, 1) if freq and freq.max else None,
        "disks": probe_disks(),
    }


def probe(nvml: ModuleType | None = None, extra_dirs: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The `gemma-fit probe --json` document (schema gemma-fit.probe/1)."""
    gpus = probe_gpus(nvml, extra_dirs)
    system = probe_system()
    return {
        "schema": SCHEMA,
        "gpus": gpus["gpus"],
        "ram_total_bytes": system.pop("ram_total_bytes"),
        "ram_available_bytes": system.pop("ram_available_bytes"),
        "cpu_count": system.pop("cpu_count"),
        **system,
        "driver_version": gpus["driver_version"],
        "cuda_driver_version": gpus["cuda_driver_version"],
        "notes": gpus["notes"],
    }


def other_gpus(extra_dirs: tuple[Path, ...] = (), sysctl: Sysctl | None = None,
               drm: Path = Path("/sys/class/drm")) -> tuple[tuple[GPUSpec, ...], tuple[str, ...]]:
    """`--gpu local` where NVML finds nothing: an Apple Silicon Mac (sysctl), AMD / Intel GPUs (sysfs)."""
    known = load_gpus(extra_dirs)
    if sysctl is not None or platform.system() == "Darwin":
        gpu, note = apple_gpu(known, sysctl or _sysctl)
        return ((gpu,) if gpu else ()), (note,)

    def by_name(name: str, total: int | None) -> GPUSpec | None:
        gid = match_device(name, total, extra_dirs)
        return known.get(gid) if gid else None

    gpus, notes = sysfs_gpus(by_name, int(psutil.virtual_memory().total), drm)
    return tuple(gpus), tuple(notes)


def _has_bf16(compute_capability: str | None) -> bool:
    """CUDA's bfloat16 arithmetic starts at compute capability 8.0 (Ampere); unknown: assumed present."""
    try:
        return compute_capability is None or float(compute_capability) >= 8.0
    except ValueError:
        return True


def local_gpus(nvml: ModuleType | None = None, extra_dirs: tuple[Path, ...] = ()) -> tuple[GPUSpec, ...]:
    """`--gpu local`: this machine's NVIDIA GPUs as GPUSpecs whose usable memory is the *free* memory now.

    A matched GPU keeps its database bandwidth and compute figures; an unknown one has None there.
    """
    known = load_gpus(extra_dirs)
    specs = []
    for gpu in probe_gpus(nvml, extra_dirs)["gpus"]:
        if gpu["total_bytes"] is None or gpu["free_bytes"] is None:
            continue
        base = known.get(gpu["matched_id"] or "")
        specs.append(with_rated_figures(GPUSpec(
            id=f"local{gpu['index']}", name=gpu["name"], vendor="nvidia", backend="cuda",
            memory_bytes=gpu["total_bytes"], usable_memory_bytes=gpu["free_bytes"], unified_memory=False,
            memory_bandwidth_gbps=None, fp16_tensor_tflops=None, arch="unknown",
            compute_capability=gpu["compute_capability"], pcie_gen=gpu["pcie_gen"], pcie_lanes=gpu["pcie_width"],
            nvlink_gbps=base.nvlink_gbps if base else None, tdp_w=gpu["power_limit_w"],
            source="NVML (this machine)", bf16_supported=_has_bf16(gpu["compute_capability"]),
        ), base))
    return tuple(specs)
