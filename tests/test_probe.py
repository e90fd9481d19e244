"""probe: a fake NVML with two GPUs (one failing PCIe queries), the real no-driver path, psutil facts."""

from __future__ import annotations

import json
import os
import shutil
import types
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gemma_fit.cli.hardware import probe_command
from gemma_fit.hardware import probe as probe_mod
from gemma_fit.hardware.catalog import load_gpus
from gemma_fit.hardware.probe import SCHEMA, local_gpus, probe, probe_gpus

MIB = 1024**2
Memory = namedtuple("Memory", "total free used")
Proc = namedtuple("Proc", "pid usedGpuMemory")


class FakeNVMLError(Exception):
    pass


def fake_nvml(gpus: list[dict[str, Any]], init_error: bool = False) -> types.ModuleType:
    """A stand-in for pynvml: handles are indexes into `gpus`; a key set to FakeNVMLError raises it."""
    m = types.ModuleType("fake_pynvml")
    m.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    m.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    m.NVML_CLOCK_MEM = 2  # type: ignore[attr-defined]
    m.shutdown_calls = 0  # type: ignore[attr-defined]

    def value(handle: int, key: str) -> Any:
        v = gpus[handle][key]
        if v is FakeNVMLError:
            raise FakeNVMLError("Not Supported")
        return v

    def init() -> None:
        if init_error:
            raise FakeNVMLError("Driver Not Loaded")

    def shutdown() -> None:
        m.shutdown_calls += 1  # type: ignore[attr-defined]

    funcs = {
        "nvmlInit": init, "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion": lambda: 12040,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: value(h, "name"),
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h:04d}",
        "nvmlDeviceGetMemoryInfo": lambda h: value(h, "memory"),
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: value(h, "pcie_gen"),
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: value(h, "pcie_width"),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: value(h, "pcie_gen_current"),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: value(h, "pcie_width"),
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": lambda h: value(h, "pcie_gen"),
        "nvmlDeviceGetCudaComputeCapability": lambda h: value(h, "cc"),
        "nvmlDeviceGetMemoryBusWidth": lambda h: value(h, "bus"),
        "nvmlDeviceGetClockInfo": lambda h, kind: 405 if kind == 2 else 210,
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: value(h, "mem_clock") if kind == 2 else 2520,
        "nvmlDeviceGetEccMode": lambda h: value(h, "ecc"),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: value(h, "power_mw"),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: value(h, "procs"),
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
        "nvmlSystemGetProcessName": lambda pid: b"ghost",
    }
    for name, fn in funcs.items():
        setattr(m, name, fn)
    return m


TWO_GPUS = [
    {"name": "NVIDIA GeForce RTX 4090", "memory": Memory(24564 * MIB, 20000 * MIB, 4564 * MIB),
     "pcie_gen": 4, "pcie_width": 16, "pcie_gen_current": 1, "cc": (8, 9), "bus": 384, "mem_clock": 10501,
     "ecc": FakeNVMLError, "power_mw": 450000, "procs": [Proc(os.getpid(), 4000 * MIB), Proc(999_999_999, None)]},
    {"name": b"NVIDIA RTX A4000", "memory": Memory(16376 * MIB, 16000 * MIB, 376 * MIB),
     "pcie_gen": FakeNVMLError, "pcie_width": FakeNVMLError, "pcie_gen_current": FakeNVMLError, "cc": (8, 6),
     "bus": 256, "mem_clock": 7001, "ecc": (1, 1), "power_mw": 140000, "procs": []},
]


def test_fake_nvml_two_gpus_one_failing_pcie() -> None:
    nvml = fake_nvml(TWO_GPUS)
    doc = probe(nvml=nvml)
    json.dumps(doc)  # serialisable as the --json output
    assert doc["schema"] == SCHEMA
    assert doc["driver_version"] == "550.54.15" and doc["cuda_driver_version"] == "12.4"
    g0, g1 = doc["gpus"]
    assert (g0["index"], g0["name"], g0["matched_id"]) == (0, "NVIDIA GeForce RTX 4090", "rtx-4090")
    assert g0["total_bytes"] == 24564 * MIB and g0["free_bytes"] == 20000 * MIB and g0["used_bytes"] == 4564 * MIB
    assert (g0["pcie_gen"], g0["pcie_width"], g0["pcie_gen_current"]) == (4, 16, 1)
    assert g0["compute_capability"] == "8.9" and g0["memory_bus_width_bits"] == 384
    assert g0["memory_clock_max_mhz"] == 10501 and g0["power_limit_w"] == 450
    assert g0["ecc_enabled"] is None  # NVMLError -> unknown, not a crash
    mine, ghost = g0["processes"]
    assert mine["pid"] == os.getpid() and mine["used_bytes"] == 4000 * MIB and mine["name"]
    assert ghost["name"] == "ghost" and ghost["used_bytes"] is None  # no such pid: NVML's name
    assert (g1["name"], g1["matched_id"]) == ("NVIDIA RTX A4000", "a4000")  # bytes names decoded
    assert g1["pcie_gen"] is None and g1["pcie_width"] is None and g1["pcie_gen_current"] is None
    assert g1["ecc_enabled"] is True and g1["processes"] == []
    assert nvml.shutdown_calls == 1  # type: ignore[attr-defined]


def test_contract_keys_and_types() -> None:
    doc = probe(nvml=fake_nvml(TWO_GPUS))
    for key, kind in [("ram_total_bytes", int), ("ram_available_bytes", int), ("cpu_count", int), ("gpus", list)]:
        assert isinstance(doc[key], kind)
    for gpu in doc["gpus"]:
        assert {"index", "name", "total_bytes", "free_bytes", "pcie_gen", "pcie_width", "matched_id"} <= set(gpu)
    assert doc["ram_total_bytes"] >= doc["ram_available_bytes"] > 0
    assert doc["cpu_count"] >= 1 and isinstance(doc["disks"], list)


def test_unknown_gpu_is_not_matched() -> None:
    gpu = dict(TWO_GPUS[1], name="NVIDIA Mystery 9000")
    assert probe_gpus(fake_nvml([gpu]))["gpus"][0]["matched_id"] is None


def test_nvml_init_error_gives_a_note_and_no_gpus() -> None:
    doc = probe(nvml=fake_nvml(TWO_GPUS, init_error=True))
    assert doc["gpus"] == []
    assert any("no NVIDIA driver" in n and "Driver Not Loaded" in n for n in doc["notes"])


def test_no_gpus_behind_a_loaded_driver() -> None:
    doc = probe(nvml=fake_nvml([]))
    assert doc["gpus"] == [] and any("reports no GPUs" in n for n in doc["notes"])


def _driver_present() -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_driver_present(), reason="this machine has an NVIDIA driver")
def test_real_no_driver_path() -> None:
    """The real pynvml raises NVMLError without a driver: empty gpus and a note, never a crash."""
    doc = probe()
    assert doc["gpus"] == []
    assert any("no NVIDIA driver" in n for n in doc["notes"])
    assert doc["ram_total_bytes"] > 0


def test_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_mod, "_import_nvml", lambda: None)
    doc = probe()
    assert doc["gpus"] == [] and any("nvidia-ml-py" in n for n in doc["notes"])


def test_local_gpus_use_free_memory() -> None:
    specs = local_gpus(nvml=fake_nvml(TWO_GPUS))
    assert [s.usable_memory_bytes for s in specs] == [20000 * MIB, 16000 * MIB]
    assert specs[0].memory_bandwidth_gbps == 1008 and specs[1].memory_bandwidth_gbps == 448
    assert specs[1].pcie_gen is None


def test_local_gpus_keep_the_rated_throughput_of_their_model() -> None:
    """A probed card answers as its database entry does: INT8 rate (quantized prompts), shader rate, clock."""
    known = load_gpus(())
    for spec, gid in zip(local_gpus(nvml=fake_nvml(TWO_GPUS)), ("rtx-4090", "a4000"), strict=True):
        rated = known[gid]
        assert spec.int8_tensor_tops == rated.int8_tensor_tops and spec.int8_tensor_tops
        assert (spec.fp16_tensor_tflops, spec.fp32_tflops, spec.boost_clock_mhz, spec.arch) == (
            rated.fp16_tensor_tflops, rated.fp32_tflops, rated.boost_clock_mhz, rated.arch)
        assert spec.fp32_accumulate_half_rate == (gid == "rtx-4090")  # GeForce only


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("probe")(probe_command)
    app.command("noop")(lambda: None)
    return app


def test_probe_command_json_and_table(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    result = runner.invoke(_app(), ["probe", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["schema"] == SCHEMA
    monkeypatch.setattr(probe_mod, "_import_nvml", lambda: fake_nvml(TWO_GPUS))
    table = runner.invoke(_app(), ["probe"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "rtx-4090" in table.output and "Gen4 x16" in table.output and "RAM:" in table.output


def test_probed_drives_map_to_storage_classes(tmp_path: Path) -> None:
    from gemma_fit.hardware.probe import _nvme_pcie_gen, storage_class_for

    link = tmp_path / "class" / "block" / "nvme0n1" / "device" / "device"
    link.mkdir(parents=True)
    (link / "current_link_speed").write_text("16.0 GT/s PCIe\n")
    assert _nvme_pcie_gen("/dev/nvme0n1p2", tmp_path) == 4
    assert _nvme_pcie_gen("/dev/nvme1n1", tmp_path) is None
    assert storage_class_for("nvme", 4)[0] == "nvme-gen4"
    assert storage_class_for("nvme", 6)[0] == "nvme-gen5"  # the fastest class the database has
    assert storage_class_for("nvme", None)[0] == "nvme-gen3"  # unknown link: the slowest NVMe class
    assert storage_class_for("ssd", None)[0] == "sata-ssd"
    assert storage_class_for("hdd", None)[0] == "hdd"
    assert storage_class_for(None, None)[0] is None


def test_cpu_check_takes_its_load_time_from_this_machines_drive() -> None:
    from gemma_fit.engines.llamacpp import run_check
    from gemma_fit.hardware.select import select_hardware
    from gemma_fit.memory.settings import RunSettings
    from gemma_fit.model.catalog import resolve_model
    from gemma_fit.present.documents import check_json

    hw = select_hardware(["cpu"], None, ())
    doc = check_json(run_check(resolve_model("gemma-3-1b"), "Q4_0", RunSettings(), hw))
    assert any("drive" in a for a in doc["assumptions"])
    if hw.disk is not None:
        assert not any("NVMe Gen4 disk" in n for n in doc["performance"]["notes"])


class _MismatchError(Exception):  # pynvml's NVMLLibraryMismatchError: not an NVMLError
    pass


def _raise(exc: BaseException) -> Any:
    raise exc


def test_a_broken_or_hostile_driver_is_unknown_figures_never_an_error() -> None:
    """What a driver cannot say (an old library, bytes the binding decodes strictly, -1.-1, free above total,
    2**32-1 GPUs) is unknown: the probe answers, and --gpu local plans with what holds together."""
    bad = dict(TWO_GPUS[0], cc=(-1, -1), memory=Memory(24564 * MIB, 2**64 - 1, 0))
    nvml = fake_nvml([bad, dict(TWO_GPUS[1], memory=Memory(16376 * MIB, 0, 16376 * MIB))])
    nvml.nvmlDeviceGetName = lambda h: _raise(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))  # type: ignore
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: _raise(_MismatchError("v3"))  # type: ignore
    g0, g1 = probe(nvml=nvml)["gpus"]
    assert (g0["name"], g0["compute_capability"], g0["total_bytes"], g0["processes"]) == ("GPU 0", None, None, [])
    assert g1["free_bytes"] == 0  # a full GPU is a figure: it holds nothing
    (full,) = local_gpus(nvml=nvml)
    assert full.usable_memory_bytes == 0
    nvml.nvmlDeviceGetCount = lambda: 2**32 - 1  # type: ignore[attr-defined]
    doc = probe(nvml=nvml)
    assert doc["gpus"] == [] and any("4294967295 GPUs" in n for n in doc["notes"])


def test_a_full_gpu_is_planned_not_divided_by() -> None:
    """Every GPU's free memory 0 (other processes hold it): llama.cpp's split has no proportion; the check answers."""
    from gemma_fit.memory.placement import split_points

    assert split_points([0, 0]) == [0.5, 1.0] and split_points([0]) == [1.0]


def test_an_installed_llama_server_that_prints_garbage_is_no_version(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`llama-server --version` is read leniently and only so far: undecodable bytes, a flood, a build number past
    any build are no version (the answer is for the pinned rules), never an error."""
    from gemma_fit.jobs import engine_version

    flood = shutil.which("yes")
    assert flood is not None
    monkeypatch.delenv("GEMMA_FIT_NO_ENGINE_PROBE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    server = tmp_path / "llama-server"
    for body, expected in ((r'printf "version: 6890 (\377\376)\n" >&2', "b6890"),
                           ('printf "version: 99999999999999999999 (x)\\n"', None),
                           (f"{flood} version", None)):  # a flood, read 64 KiB far
        server.write_text(f"#!/bin/sh\n{body}\n")
        server.chmod(0o755)
        assert engine_version.installed_llama_server() == expected
