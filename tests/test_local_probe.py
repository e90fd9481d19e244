"""`--gpu local` beyond NVML, from recorded outputs of each source: sysctl on an Apple Silicon Mac and the
amdgpu driver's sysfs files on Linux (a discrete Radeon and a Strix Halo APU)."""

from __future__ import annotations

from pathlib import Path

import psutil

from gemma_fit import check
from gemma_fit.hardware.catalog import load_gpus
from gemma_fit.hardware.probe import other_gpus
from gemma_fit.hardware.probe_other import apple_gpu
from gemma_fit.hardware.spec import Hardware

GIB = 1024**3
# `sysctl -n <name>` on a 64 GB MacBook Pro with an M4 Max (recorded values)
MAC = {"machdep.cpu.brand_string": "Apple M4 Max", "hw.memsize": "68719476736", "iogpu.wired_limit_mb": "0"}


def test_a_mac_is_its_database_entry_and_unified() -> None:
    gpu, note = apple_gpu(load_gpus(), MAC.get)
    assert gpu is not None and gpu.id == "local0" and gpu.unified_memory and gpu.unified_platform == "macos"
    assert gpu.memory_bytes == 64 * GIB and gpu.usable_memory_bytes == 48 * GIB  # Metal's default, 3/4
    assert "M4 Max" in note
    r = check("gemma-3-27b", Hardware(gpu.name, (gpu,), None, None))
    assert r.detail.estimate.unified_pool is not None


def test_wired_limit_raises_the_gpu_ceiling() -> None:
    gpu, note = apple_gpu(load_gpus(), {**MAC, "iogpu.wired_limit_mb": "57344"}.get)
    assert gpu is not None and gpu.usable_memory_bytes == 56 * GIB and "iogpu.wired_limit_mb=57344" in note


def test_an_unknown_mac_size_names_the_sizes_that_exist() -> None:
    gpu, note = apple_gpu(load_gpus(), {**MAC, "hw.memsize": str(72 * GIB)}.get)
    assert gpu is None and "72 GB is not in the database" in note and "64" in note


def test_not_a_mac() -> None:
    gpu, note = apple_gpu(load_gpus(), {"machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9980HK"}.get)
    assert gpu is None and "not Apple Silicon" in note


def _card(drm: Path, name: str, files: dict[str, str]) -> None:
    dev = drm / name / "device"
    dev.mkdir(parents=True)
    for key, value in files.items():
        (dev / key).write_text(value + "\n", encoding="ascii")


def test_sysfs_discrete_radeon_and_strix_halo_apu(tmp_path: Path) -> None:
    drm = tmp_path / "drm"
    _card(drm, "card0", {"vendor": "0x1002", "device": "0x744c", "product_name": "Radeon RX 7900 XTX",
                         "mem_info_vram_total": str(24 * GIB), "mem_info_vram_used": str(GIB)})
    _card(drm, "card1", {"vendor": "0x1002", "device": "0x1586", "mem_info_vram_total": str(512 * 1024**2),
                         "mem_info_vram_used": str(256 * 1024**2), "mem_info_gtt_total": str(64 * GIB)})
    _card(drm, "card1-DP-1", {"vendor": "0x1002"})  # a connector, not a GPU
    _card(drm, "card2", {"vendor": "0x10de", "mem_info_vram_total": "1", "mem_info_vram_used": "0"})  # NVIDIA: NVML's
    gpus, notes = other_gpus(drm=drm)
    assert [g.id for g in gpus] == ["local0", "local1"] and len(notes) == 2
    radeon, apu = gpus
    assert not radeon.unified_memory and radeon.usable_memory_bytes == 23 * GIB
    assert apu.unified_memory and apu.unified_platform == "amd-uma"
    assert apu.usable_memory_bytes == 64 * GIB - 256 * 1024**2  # the GTT, less what is in use
    assert apu.memory_bytes == psutil.virtual_memory().total  # the system's RAM, not the 512 MiB carve-out
    assert "unified, GTT 64.0 GiB" in notes[1]
