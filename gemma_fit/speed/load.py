"""Load time: the GGUF read from the drive (or the page cache) while the GPUs' share crosses the host link."""

from __future__ import annotations

from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.memory.estimate import MemoryEstimate
from gemma_fit.speed.calibration import load_setup_s, load_terms
from gemma_fit.speed.links import Link

# Assumed when the user gives no machine file (flagged in the output): a typical desktop.
DEFAULT_DISK_READ_GBPS = 7.0  # NVMe PCIe 4.0 x4 sequential read (hardware_db/storage.yaml nvme-gen4)


def load_seconds(plan: TensorPlan, est: MemoryEstimate, host: Link | None, disk: float | None, ram_bw: float,
                  ram_bytes: int | None, notes: list[str]) -> tuple[float, float | None]:
    """(cold, warm) load seconds: the file is read from disk (cold) or from the page cache (warm, when
    it fits in RAM) while the GPU's share is uploaded over PCIe; the two overlap, so the slower wins."""
    disk_bw = disk or DEFAULT_DISK_READ_GBPS
    if disk is None:
        notes.append(f"load time from an NVMe Gen4 disk ({DEFAULT_DISK_READ_GBPS} GB/s), cold page cache")
    file_bytes = plan.tensor_data_bytes
    device_bytes = sum(d.weights_bytes for d in est.devices)
    upload = host.seconds(device_bytes) if host is not None and device_bytes else 0.0
    setup = load_setup_s()
    cold = max(file_bytes / (disk_bw * 1e9), upload) + setup
    if ram_bytes is not None and file_bytes > ram_bytes:
        return cold, None
    cached = file_bytes / (ram_bw * 1e9 * load_terms()["page_cache_fraction_of_ram"])
    return cold, max(cached, upload) + setup


def load_bottleneck(plan: TensorPlan, est: MemoryEstimate, host: Link | None, disk: float | None) -> str:
    disk_bw = disk or DEFAULT_DISK_READ_GBPS
    read = plan.tensor_data_bytes / (disk_bw * 1e9)
    device_bytes = sum(d.weights_bytes for d in est.devices)
    upload = host.seconds(device_bytes) if host is not None and device_bytes else 0.0
    if read >= upload:
        return (f"the cold load reads {plan.tensor_data_bytes / 1e9:.1f} GB from a {disk_bw:g} GB/s drive: a faster "
                "drive (NVMe Gen4/5) or a file already in the page cache moves it")
    return f"the load uploads {device_bytes / 1e9:.1f} GB over {host.name if host else 'PCIe'}: a wider link moves it"
