"""The database as sold: Apple Silicon in every memory size, Jetson, Strix Halo, DGX Spark, laptop GPUs, and
the MI250X as the two GCDs software sees; unknown sizes name the ones that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.catalog import load_gpu_entries, load_gpus, resolve_gpu
from gemma_fit.hardware.machine_file import load_machine
from gemma_fit.hardware.select import select_hardware

GIB = 1024**3


def test_apple_chips_come_in_each_memory_size() -> None:
    ids = set(load_gpus())
    for chip in ("m1", "m1-pro", "m1-max", "m2", "m2-max", "m3-max", "m4", "m4-pro", "m4-max"):
        sizes = [i for i in ids if re.fullmatch(rf"{chip}-\d+gb", i)]
        assert len(sizes) >= 2, chip
    mac = resolve_gpu("m4-max-64gb")
    assert mac.memory_bytes == 64 * GIB and mac.unified_memory and mac.unified_platform == "macos"


def test_every_unified_entry_names_its_platform_and_has_a_source() -> None:
    for entry in load_gpu_entries().values():
        if entry.unified_memory:
            assert entry.unified_platform in ("macos", "l4t", "dgx-os", "amd-uma"), entry.id
        assert entry.source.startswith("http")


@pytest.mark.parametrize("gpu_id", ["jetson-orin-nano-8gb", "jetson-agx-orin-64gb", "jetson-agx-thor-t5000",
                                    "ryzen-ai-max-395-128gb", "dgx-spark", "rtx-4090-laptop", "rtx-3060-laptop"])
def test_the_machines_people_run_gemma_on_are_there(gpu_id: str) -> None:
    assert resolve_gpu(gpu_id).memory_bandwidth_gbps


def test_laptop_gpus_are_their_own_parts() -> None:
    laptop, desktop = resolve_gpu("rtx-4090-laptop"), resolve_gpu("rtx-4090")
    assert laptop.memory_bytes == 16 * GIB and desktop.memory_bytes == 24 * GIB
    assert (laptop.memory_bandwidth_gbps or 0) < (desktop.memory_bandwidth_gbps or 0)


def test_an_unknown_memory_size_names_the_sizes_sold() -> None:
    with pytest.raises(BadInput, match="that chip was sold with m4-max-36gb, m4-max-48gb, m4-max-64gb, m4-max-128gb"):
        resolve_gpu("m4-max-72gb")


def test_mi250x_is_two_devices(tmp_path: Path) -> None:
    hw = select_hardware(["mi250x"], None, ())
    assert [g.memory_bytes for g in hw.gpus] == [64 * GIB, 64 * GIB]
    card = resolve_gpu("mi250x")
    assert sum(g.memory_bandwidth_gbps or 0 for g in hw.gpus) == pytest.approx(card.memory_bandwidth_gbps or 0)
    machine = tmp_path / "m.yaml"
    machine.write_text("name: node\ngpus:\n  - gpu: mi250x\n    count: 4\nram_gb: 512\n", encoding="utf-8")
    assert len(load_machine(machine).gpus) == 8
    machine.write_text("name: node\ngpus:\n  - gpu: mi250x\n    count: 9\nram_gb: 512\n", encoding="utf-8")
    with pytest.raises(BadInput, match="18 devices"):
        load_machine(machine)
