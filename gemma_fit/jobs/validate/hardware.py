"""`gemma-fit db validate`'s checks of hardware_db files (gpus, cpus, interconnects, memory, storage) and of
machine files: the schema, unique ids and GPU names, and the physical consistency of each entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date

from pydantic import BaseModel

from gemma_fit.base.errors import BadInput
from gemma_fit.db.yaml_lines import Loc
from gemma_fit.hardware.catalog import find_gpu_entry, load_hardware_db, name_key
from gemma_fit.hardware.power_schema import PowerModesEntry
from gemma_fit.hardware.price_schema import ApiEntry, ElectricityEntry, PriceEntry, RentEntry, SourcedPrice
from gemma_fit.hardware.prices import price_month
from gemma_fit.hardware.schema import (
    CPUEntry,
    GPUEntry,
    GPUSlot,
    InterconnectEntry,
    MachineFile,
    MemoryEntry,
    StorageEntry,
)
from gemma_fit.jobs.validate.common import Doc, Report, Seen, check_unique, validate_with

BANDWIDTH_TOLERANCE = 0.03  # memory_bandwidth_gbps vs bus_width_bits / 8 x memory_data_rate_gbps
MEMORY_TOLERANCE = 0.03  # memory.yaml per_channel_gbps vs speed_mts x 8 bytes

# Dense FP16 tensor TFLOPS a part of each architecture can plausibly have (smallest SoC to largest module).
# Volta: from the Jetson AGX Xavier GPU (64 tensor cores, about 11) to the V100S (130).
ARCH_FP16_TFLOPS: dict[str, tuple[float, float]] = {
    "volta": (5, 150), "turing": (5, 150), "ampere": (5, 400), "ada": (20, 450), "hopper": (400, 1200),
    "blackwell": (50, 2600),
    "rdna3": (10, 200), "rdna4": (50, 400), "cdna": (100, 250), "cdna2": (50, 500), "cdna3": (300, 1500),
    "cdna4": (1500, 3000), "xe-hpg": (10, 200), "xe2-hpg": (10, 200), "xe-hpc": (100, 900),
    "apple-m1": (1, 100), "apple-m2": (1, 100), "apple-m3": (1, 100), "apple-m4": (1, 100), "apple-m5": (1, 100),
}
# Architectures without tensor (matrix) units: Maxwell, Pascal, GCN 5 (Vega) and RDNA 1/2 multiply on the shader
# cores (packed FP16, DP4A-style INT8 dot products where the chip has them), so their fp16_tensor_tflops /
# int8_tensor_tops stay null, as on the tensor-less Turing TU116/TU117 parts (t1000); the non-tensor rates belong in
# notes. A number there would be read as tensor throughput by the prefill estimate and the speed calibration.
NO_MATRIX_UNITS = {"maxwell", "pascal", "gcn5", "rdna1", "rdna2"}
# FP32 lanes (shader ALUs) = fp32_tflops / (2 x boost_clock_mhz): from the smallest to the largest part of each
# architecture (a Jetson Orin Nano's 512 to a GA102's 10752; RDNA 3 counts dual issue, as TechPowerUp does, so a
# 7900 XTX is 12288). A figure outside is a wrong unit, a tensor or sparse rate, or a base or memory clock.
ARCH_FP32_LANES: dict[str, tuple[int, int]] = {
    "maxwell": (128, 3072), "pascal": (256, 3840), "volta": (384, 5120), "turing": (512, 4608), "ampere": (256, 10752),
    "ada": (1024, 18432), "hopper": (4096, 18432), "blackwell": (1024, 24576),
    "gcn5": (256, 4096), "rdna1": (512, 2560), "rdna2": (512, 5120), "rdna3": (512, 12288), "rdna4": (1024, 8192),
    "cdna": (4096, 7680), "cdna2": (4096, 14080), "cdna3": (4096, 19456), "cdna4": (8192, 16384),
    "xe-hpg": (512, 4096), "xe2-hpg": (512, 4096), "xe-hpc": (4096, 16384), "apple-m1": (1024, 8192),
    "apple-m5": (1024, 10240), "apple-m2": (1024, 9728), "apple-m3": (1024, 10240),
    "apple-m4": (1024, 10240),
}
LANES_TOLERANCE = 0.03  # the published figures are rounded
# fp16_tensor_tflops / fp32_tflops: tensor FLOP per shader FLOP per clock. GeForce FP32-accumulate figures
# and cut-down tensor parts (A10G, L40's datasheet figure, H20) sit at the low end; GA100-style (A100, A30)
# and data-centre Blackwell (B200, about 30) at the high end.
ARCH_TENSOR_FP32_RATIO: dict[str, tuple[float, float]] = {
    "volta": (4, 16), "turing": (3, 16), "ampere": (1.5, 20), "ada": (1.5, 6), "hopper": (2, 20),
    "blackwell": (1.5, 40), "rdna3": (1, 5), "rdna4": (2, 6), "cdna": (6, 10), "cdna2": (4, 12), "cdna3": (8, 24),
    "cdna4": (24, 40), "xe-hpg": (4, 12), "xe2-hpg": (4, 12), "xe-hpc": (12, 20),
}
# Per-pin data rate (Gbit/s) by memory type, most specific prefix first.
DATA_RATE_GBPS: list[tuple[str, tuple[float, float]]] = [
    ("GDDR6X", (19, 24)), ("GDDR7", (28, 40)), ("GDDR6", (10, 24)), ("HBM", (1, 10)), ("LPDDR", (3, 11)),
]
HARDWARE_MODELS: list[type[BaseModel]] = [GPUEntry, CPUEntry, InterconnectEntry, MemoryEntry, StorageEntry,
                                          PriceEntry]


# --- physical consistency of one GPU entry ----------------------------------------------------


def _gpu_physics(e: GPUEntry) -> Iterator[tuple[str, str]]:
    if e.bus_width_bits and e.memory_data_rate_gbps and e.memory_bandwidth_gbps:
        calc = e.bus_width_bits / 8 * e.memory_data_rate_gbps
        off = e.memory_bandwidth_gbps / calc - 1
        if abs(off) > BANDWIDTH_TOLERANCE:
            yield ("memory_bandwidth_gbps",
                   f"{e.memory_bandwidth_gbps:g} GB/s disagrees with bus_width_bits / 8 x memory_data_rate_gbps = "
                   f"{e.bus_width_bits} / 8 x {e.memory_data_rate_gbps:g} = {calc:.1f} GB/s ({off:+.0%})")
    if e.arch in NO_MATRIX_UNITS:
        for name in ("fp16_tensor_tflops", "int8_tensor_tops"):
            if getattr(e, name) is not None:
                yield (name, f"{e.arch} has no tensor (matrix) units: use null and give the shader-core rate in notes")
    elif e.fp16_tensor_tflops is not None:
        low, high = ARCH_FP16_TFLOPS[e.arch]
        if not low <= e.fp16_tensor_tflops <= high:
            yield ("fp16_tensor_tflops", f"{e.fp16_tensor_tflops:g} TFLOPS is outside {low:g}-{high:g}, "
                   f"the plausible dense FP16 range for {e.arch} (sparse figure? wrong unit?)")
    yield from _gpu_fp32_checks(e)
    yield from _gpu_memory_checks(e)
    yield from _gpu_vendor_checks(e)


def _gpu_fp32_checks(e: GPUEntry) -> Iterator[tuple[str, str]]:
    """fp32_tflops against the boost clock (FP32 lanes) and against the tensor rate, per architecture."""
    if e.fp32_tflops is None:
        return
    lanes_range = ARCH_FP32_LANES.get(e.arch)
    if e.boost_clock_mhz and lanes_range:
        lanes = e.fp32_tflops * 1e6 / (2 * e.boost_clock_mhz)
        low, high = lanes_range
        if not low * (1 - LANES_TOLERANCE) <= lanes <= high * (1 + LANES_TOLERANCE):
            yield ("fp32_tflops", f"{e.fp32_tflops:g} TFLOPS at boost_clock_mhz {e.boost_clock_mhz:g} means "
                   f"{lanes:.0f} FP32 lanes (fp32_tflops / (2 x clock)), outside {low}-{high} for {e.arch} "
                   "(wrong unit? tensor or sparse rate? base or memory clock?)")
    ratio_range = ARCH_TENSOR_FP32_RATIO.get(e.arch)
    if e.fp16_tensor_tflops is not None and ratio_range:
        ratio = e.fp16_tensor_tflops / e.fp32_tflops
        r_low, r_high = ratio_range
        if not r_low <= ratio <= r_high:
            yield ("fp32_tflops", f"fp16_tensor_tflops / fp32_tflops = {e.fp16_tensor_tflops:g} / {e.fp32_tflops:g} "
                   f"= {ratio:.1f}, outside {r_low:g}-{r_high:g} for {e.arch} (one of the two is off by a unit or "
                   "a sparse/dense factor)")


def _gpu_memory_checks(e: GPUEntry) -> Iterator[tuple[str, str]]:
    if e.usable_memory_bytes < e.memory_bytes // 2:
        yield ("usable_memory_bytes", f"{e.usable_memory_bytes} is under half of memory_bytes {e.memory_bytes}")
    rate = e.memory_data_rate_gbps
    for prefix, (low, high) in DATA_RATE_GBPS:
        if rate is not None and e.memory_type.upper().startswith(prefix.upper()):
            if not low <= rate <= high:
                yield ("memory_data_rate_gbps", f"{rate:g} Gbit/s per pin is outside {low:g}-{high:g} for {prefix}")
            break
    if e.pcie_lanes is not None and e.pcie_gen is None:
        yield ("pcie_gen", "pcie_lanes is given but pcie_gen is not")


def _gpu_vendor_checks(e: GPUEntry) -> Iterator[tuple[str, str]]:
    cc = e.compute_capability
    if e.vendor == "nvidia" and (cc is None or not re.fullmatch(r"\d+\.\d+", cc)):
        yield ("compute_capability", f"NVIDIA GPUs need a CUDA compute capability like '8.6', not {cc!r}")
    if e.vendor == "amd" and (cc is None or not cc.startswith("gfx")):
        yield ("compute_capability", f"AMD GPUs need a gfx target like 'gfx1100', not {cc!r}")
    if e.vendor in ("apple", "intel") and cc is not None:
        yield ("compute_capability", f"{e.vendor} GPUs have no compute capability; use null")
    if e.vendor != "nvidia" and e.nvlink_gbps is not None:
        yield ("nvlink_gbps", "NVLink is NVIDIA's; use null for other vendors")
    if any(not a.strip() for a in e.aliases):
        yield ("aliases", "an alias is empty")


# --- per-file checks --------------------------------------------------------------------------


def _check_gpu_names(doc: Doc, report: Report, seen: Seen, e: GPUEntry, loc: Loc) -> None:
    for i, alias in enumerate([e.id, *e.aliases]):
        where = (*loc, "id") if i == 0 else (*loc, "aliases", i - 1)
        key = name_key(alias)
        if key in seen.names and seen.names[key][0] != e.id:
            other, path, line = seen.names[key]
            report.add(doc, where, f"{e.id}.aliases", f"'{alias}' also names {other} ({path}:{line})")
        else:
            seen.names.setdefault(key, (e.id, doc.path, doc.line(where)))
    for i, device in enumerate(e.device_names):
        seen.device_names.append((name_key(device), e.id, doc, (*loc, "device_names", i)))


def check_list_file(doc: Doc, report: Report, seen: Seen, kind: str) -> None:
    for key in doc.data:
        if key != kind:
            report.add(doc, (key,), str(key), f"unknown top-level key (a {kind} file holds only '{kind}:')")
    items = doc.data[kind]
    if not isinstance(items, list) or not items:
        report.add(doc, (kind,), kind, "expected a non-empty list of entries")
        return
    model = {"gpus": GPUEntry, "cpus": CPUEntry, "interconnects": InterconnectEntry, "memory": MemoryEntry,
             "storage": StorageEntry, "prices": PriceEntry, "rent": RentEntry, "api": ApiEntry,
             "electricity": ElectricityEntry, "power_modes": PowerModesEntry}[kind]
    for i, item in enumerate(items):
        loc = (kind, i)
        entry = validate_with(doc, report, model, item, loc, HARDWARE_MODELS)
        item_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(item_id, str):
            check_unique(doc, report, seen, kind, item_id, loc, f"{item_id}.id")
        if entry is None:
            continue
        report.counts[kind] = report.counts.get(kind, 0) + 1
        for name, message in _entry_physics(entry):
            report.add(doc, (*loc, name), f"{entry.id}.{name}", message)
        if isinstance(entry, GPUEntry):
            _check_gpu_names(doc, report, seen, entry, loc)
        if isinstance(entry, RentEntry):
            seen.refs.append((doc.path, doc.line((*loc, "gpu")), f"{entry.id}.gpu", entry.gpu, "gpus"))
        if isinstance(entry, PowerModesEntry):  # a module's modes: its id is a GPU's
            seen.refs.append((doc.path, doc.line((*loc, "id")), f"{entry.id}.id", entry.id, "gpus"))
        if isinstance(entry, ElectricityEntry) and entry.default:
            seen.refs.append((doc.path, doc.line((*loc, "default")), f"{entry.id}.default", entry.id,
                              "default-electricity"))
        if isinstance(entry, ApiEntry):
            seen.refs.append((doc.path, doc.line((*loc, "model")), f"{entry.id}.model", entry.model.lower(), "model"))


def _price_dates(entry: PriceEntry) -> Iterator[tuple[str, str]]:
    """A price dated after today is a typo (or a forecast, which is not a price)."""
    today = date.today().isoformat()
    for name in ("msrp", "street", "used"):
        point = getattr(entry, name)
        if point is not None and price_month(point.date) > today[:7]:
            yield (name, f"dated {point.date}, after today ({today})")


def _running_dates(entry: BaseModel) -> Iterator[tuple[str, str]]:
    today = date.today().isoformat()
    for name, point in vars(entry).items():
        if isinstance(point, SourcedPrice) and price_month(point.date) > today[:7]:
            yield (name, f"dated {point.date}, after today ({today})")


def _entry_physics(entry: BaseModel) -> Iterator[tuple[str, str]]:
    if isinstance(entry, PriceEntry):
        yield from _price_dates(entry)
    if isinstance(entry, RentEntry | ApiEntry | ElectricityEntry):
        yield from _running_dates(entry)
    if isinstance(entry, GPUEntry):
        yield from _gpu_physics(entry)
    elif isinstance(entry, MemoryEntry):
        calc = entry.speed_mts * 8 / 1000
        if abs(entry.per_channel_gbps / calc - 1) > MEMORY_TOLERANCE:
            yield ("per_channel_gbps", f"{entry.per_channel_gbps:g} GB/s disagrees with speed_mts x 8 bytes = "
                   f"{calc:.2f} GB/s per 64-bit channel")
    elif isinstance(entry, InterconnectEntry) and entry.kind == "pcie" and entry.generation and entry.lanes:
        per_lane = {1: 0.25, 2: 0.5, 3: 0.9846, 4: 1.9692, 5: 3.9385, 6: 7.5625}[entry.generation]
        calc = per_lane * entry.lanes
        if abs(entry.per_direction_gbps / calc - 1) > BANDWIDTH_TOLERANCE:
            yield ("per_direction_gbps", f"{entry.per_direction_gbps:g} GB/s disagrees with PCIe "
                   f"{entry.generation}.0 x{entry.lanes} = {calc:.2f} GB/s per direction")


def check_machine(doc: Doc, report: Report) -> None:
    machine = validate_with(doc, report, MachineFile, doc.data, (), [MachineFile, GPUSlot, GPUEntry])
    if machine is None:
        return
    report.counts["machines"] = report.counts.get("machines", 0) + 1
    for i, item in enumerate(machine.gpus):
        gpu = item.gpu if isinstance(item, GPUSlot) else item
        if isinstance(gpu, str):
            try:
                find_gpu_entry(gpu)
            except BadInput as exc:
                report.add(doc, ("gpus", i), f"gpus[{i}]", str(exc))
    if machine.disk and machine.disk not in load_hardware_db().storage:
        known = ", ".join(sorted(load_hardware_db().storage))
        report.add(doc, ("disk",), "disk", f"unknown storage class '{machine.disk}' (known: {known})")
