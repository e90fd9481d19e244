"""Speed: decode and prefill tokens/s, time to first token and load time, with the bottleneck named.

Decode is memory-bound: every generated token reads the weights of each layer (for a mixture of
experts only the experts it routes to) and the KV cache up to the current position, from the memory
that holds them. Prefill is compute-bound: 2 FLOPs per weight per token plus attention, on the tensor
cores (INT8 for quantized weights, which llama.cpp multiplies with its MMQ kernels; FP16 otherwise).
Efficiencies (the fraction of datasheet bandwidth or throughput llama.cpp reaches) are calibrated on
published llama-bench results: model_db/llamacpp/speed_calibration.yaml, benchmarks/calibrate_speed.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .db_files import read_packaged_yaml
from .estimate import MemoryEstimate
from .hardware_db import GPUSpec
from .model_spec import ModelSpec
from .placement import CPU
from .tensor_plan import TensorPlan, TensorSpec

# Assumed when the user gives no machine file (flagged in the output): a typical desktop.
DEFAULT_RAM_BANDWIDTH_GBPS = 89.6  # DDR5-5600, two 64-bit channels
DEFAULT_DISK_READ_GBPS = 7.0  # NVMe PCIe 4.0 x4 sequential read (hardware_db/storage.yaml nvme-gen4)
DEFAULT_PCIE_GBPS = 25.0  # PCIe 4.0 x16 per direction, after encoding, as measured by typical copies


@cache
def _calibration() -> dict:
    return read_packaged_yaml("llamacpp/speed_calibration.yaml")


def decode_model(backend: str, arch: str) -> tuple[float, float, str]:
    """(bandwidth efficiency, fixed seconds per layer per token, where from) for decode.

    The per-backend least-squares fit (seconds per token = bytes / bandwidth / efficiency + layers x
    per-layer cost) where at least three GPUs of the backend were measured; else the median efficiency."""
    fit = (_calibration()["decode"].get("fits") or {}).get(backend)
    if fit:
        return float(fit["efficiency"]), float(fit["per_layer_s"]), f"{backend} fit over published llama-bench runs"
    eff, src = efficiency("decode", backend, arch)
    return eff, 0.0, src


def efficiency(kind: str, backend: str, arch: str) -> tuple[float, str]:
    """Calibrated efficiency for a GPU, and where it comes from."""
    table = _calibration()[kind]
    group = f"{backend}-{arch}"
    if group in table["groups"]:
        return float(table["groups"][group]["efficiency"]), f"{group} median of {table['groups'][group]['n']} runs"
    if backend in table["backends"]:
        return float(table["backends"][backend]["efficiency"]), f"{backend} median (no {arch} data)"
    all_effs = [v["efficiency"] for v in table["backends"].values()]
    return float(sorted(all_effs)[len(all_effs) // 2]), "all-backend median (no data for this backend)"


def cpu_terms() -> tuple[float, float, str]:
    """(decode efficiency vs memory bandwidth, prefill GFLOP/s per core, where measured)."""
    cpu = _calibration().get("cpu") or {}
    m = cpu.get("machine", {})
    where = f"measured with llama-bench on a {m.get('logical_cores', '?')}-core {m.get('cpu', 'CPU')} VM"
    return float(cpu.get("decode_efficiency", 0.5)), float(cpu.get("prefill_gflops_per_core", 60.0)), where


@dataclass(frozen=True)
class Performance:
    decode_tokens_per_s: float
    prefill_tokens_per_s: float
    ttft_s: float
    load_s: float
    bottleneck: str
    prompt_tokens: int
    decode_time_by_device_s: dict[str, float]
    notes: tuple[str, ...]


def _read_per_token(t: TensorSpec, plan: TensorPlan) -> float:
    """Bytes of this weight read to generate one token."""
    if t.role == "input":
        return 0.0  # token_embd / per_layer_token_embd: get_rows reads one row
    if "_exps" in t.name and plan.model.n_expert:
        return t.n_bytes * plan.model.n_expert_used / plan.model.n_expert
    return float(t.n_bytes)


def _flops_per_token(t: TensorSpec, plan: TensorPlan) -> float:
    if t.role == "input" or len(t.shape) < 2 or t.name == "output.weight":
        return 0.0
    n = float(t.n_elements)
    if "_exps" in t.name and plan.model.n_expert:
        n *= plan.model.n_expert_used / plan.model.n_expert
    return 2.0 * n


@dataclass(frozen=True)
class _TokenWork:
    """Per-token weight bytes read and matmul FLOPs, grouped the way placement moves them."""

    layers: tuple[tuple[float, float], ...]
    output: tuple[float, float]


_WORK: dict[int, tuple[TensorPlan, _TokenWork]] = {}


def _token_work(plan: TensorPlan) -> _TokenWork:
    hit = _WORK.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    layers = [[0.0, 0.0] for _ in range(plan.model.n_layer)]
    output = [0.0, 0.0]
    for t in plan.tensors:
        if t.role == "input":
            continue
        slot = output if t.role == "output" else layers[t.layer if t.layer is not None else 0]
        slot[0] += _read_per_token(t, plan)
        slot[1] += _flops_per_token(t, plan)
    if "output.weight" not in plan.by_name():
        output[0] += plan.by_name()["token_embd.weight"].n_bytes  # the tied output matrix: read every token
    work = _TokenWork(tuple((r, f) for r, f in layers), (output[0], output[1]))
    _WORK[id(plan)] = (plan, work)
    return work


def _kv_read_per_token(model: ModelSpec, est: MemoryEstimate, position: int) -> dict[int, float]:
    """KV bytes attended for one token at `position`, per layer (SWA layers stop at their cache)."""
    out = {}
    for layer in model.layers:
        if layer.index not in est.kv.layer_bytes:
            continue
        cells = est.kv.swa_cells if layer.is_swa and model.has_swa else est.kv.base_cells
        per_cell = est.kv.layer_bytes[layer.index] / (cells * est.kv.n_streams)
        out[layer.index] = per_cell * min(position, cells)
    return out


class SpeedInputError(ValueError):
    """Speed cannot be predicted (the memory verdict still stands)."""


def predict_performance(plan: TensorPlan, est: MemoryEstimate, gpus: tuple[GPUSpec, ...],
                        prompt_tokens: int, ram_bandwidth_gbps: float | None = None,
                        disk_read_gbps: float | None = None, cpu_cores: int | None = None) -> Performance:
    model = plan.model
    if prompt_tokens > est.n_ctx:
        raise SpeedInputError(f"a prompt of {prompt_tokens:,} tokens is longer than the context ({est.n_ctx:,})")
    missing = [g.name for g in gpus if not g.memory_bandwidth_gbps]
    if missing:
        raise SpeedInputError(f"no memory-bandwidth figure for {', '.join(missing)} in the hardware database")
    notes: list[str] = []
    ram_bw = ram_bandwidth_gbps or DEFAULT_RAM_BANDWIDTH_GBPS
    if ram_bandwidth_gbps is None:
        notes.append(f"system memory assumed {DEFAULT_RAM_BANDWIDTH_GBPS} GB/s (DDR5-5600 dual channel); "
                     "give --hardware with ram_type/speed for yours")
    placement = est.placement
    device_of_layer = list(placement.layer_device)
    read = {d: 0.0 for d in [*range(len(gpus)), CPU]}
    flops = {d: 0.0 for d in [*range(len(gpus)), CPU]}
    work = _token_work(plan)
    for il, (r, f) in enumerate(work.layers):
        read[device_of_layer[il]] += r
        flops[device_of_layer[il]] += f
    read[placement.output_device] += work.output[0]
    flops[placement.output_device] += work.output[1]
    position = max(1, prompt_tokens)
    for il, nbytes in _kv_read_per_token(model, est, position).items():
        read[device_of_layer[il] if est.settings.kv_offload else CPU] += nbytes
    times: dict[str, float] = {}
    pp_times: dict[str, float] = {}
    for i, g in enumerate(gpus):
        eff, per_layer, src = decode_model(g.backend, g.arch)
        bw = (g.memory_bandwidth_gbps or 0) * 1e9 * eff
        n_layers = sum(1 for d in device_of_layer if d == i)
        times[g.id] = read[i] / bw + n_layers * per_layer if bw else float("inf")
        pp_eff, _ = efficiency("prefill", g.backend, "consumer" if "GeForce" in g.name else "pro")
        quantized = plan.ftype.default_type.is_quantized
        tops = (g.int8_tensor_tops if quantized else None) or g.fp16_tensor_tflops or 0
        pp_times[g.id] = flops[i] / (tops * 1e12 * pp_eff) if tops else float("inf")
        if i == 0:
            notes.append(f"decode efficiency {eff:.2f} of {g.memory_bandwidth_gbps} GB/s ({src})")
    cpu_eff, cpu_gflops_core, cpu_where = cpu_terms()
    if read[CPU] > 0 or not gpus:
        times["cpu"] = read[CPU] / (ram_bw * 1e9 * cpu_eff)
        notes.append(f"CPU layers decode at {cpu_eff:.0%} of system-memory bandwidth ({cpu_where})")
    decode_s = sum(times.values())
    decode_tps = 1.0 / decode_s if decode_s > 0 else 0.0
    # prefill: GPU layers compute-bound; CPU-resident layers' weights cross PCIe once per ubatch
    n_ub = est.settings.ubatch
    pcie = _pcie_gbps(gpus)
    cpu_layer_bytes = read[CPU] if gpus else 0.0
    pp_per_token = sum(pp_times.values())
    if gpus and cpu_layer_bytes:
        pp_per_token += cpu_layer_bytes / (pcie * 1e9) / n_ub
    if not gpus:
        cores = cpu_cores or 8
        pp_per_token = flops[CPU] / (cpu_gflops_core * cores * 1e9)
        notes.append(f"CPU prefill at {cpu_gflops_core:.0f} GFLOP/s per core x {cores} cores ({cpu_where})"
                     + ("" if cpu_cores else "; 8 cores assumed"))
    prefill_tps = 1.0 / pp_per_token if pp_per_token > 0 else 0.0
    ttft = prompt_tokens / prefill_tps + decode_s if prefill_tps else float("inf")
    load = _load_seconds(plan, est, pcie, disk_read_gbps, notes)
    bottleneck = _bottleneck(times, pp_times, gpus, est, cpu_layer_bytes)
    return Performance(decode_tps, prefill_tps, ttft, load, bottleneck, prompt_tokens, times, tuple(notes))


def _pcie_gbps(gpus: tuple[GPUSpec, ...]) -> float:
    if not gpus or gpus[0].pcie_gen is None or gpus[0].pcie_lanes is None:
        return DEFAULT_PCIE_GBPS
    per_lane = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}.get(gpus[0].pcie_gen, 1.969)  # GB/s per lane per direction
    return per_lane * gpus[0].pcie_lanes


def _load_seconds(plan: TensorPlan, est: MemoryEstimate, pcie: float, disk: float | None,
                  notes: list[str]) -> float:
    disk_bw = disk or DEFAULT_DISK_READ_GBPS
    if disk is None:
        notes.append(f"load time from an NVMe Gen4 disk ({DEFAULT_DISK_READ_GBPS} GB/s), cold page cache")
    device_bytes = sum(d.weights_bytes for d in est.devices)
    file_read = plan.tensor_data_bytes / (disk_bw * 1e9)
    upload = device_bytes / (pcie * 1e9)
    return max(file_read, upload) + 0.5  # reading and uploading overlap; ~0.5 s of context setup


def _bottleneck(times: dict[str, float], pp_times: dict[str, float], gpus: tuple[GPUSpec, ...],
                est: MemoryEstimate, cpu_bytes: float) -> str:
    if not times:
        return "unknown"
    worst = max(times, key=lambda k: times[k])
    if worst == "cpu" and gpus:
        n_cpu = sum(1 for d in est.placement.layer_device if d == CPU)
        return (f"decode waits on system memory: {n_cpu} layers run on the CPU; offloading fewer layers to the "
                f"CPU (a smaller quant or context, or a GPU with more memory) moves it")
    if worst == "cpu":
        return "decode is bound by system-memory bandwidth (CPU only); faster RAM or a GPU moves it"
    gpu = next(g for g in gpus if g.id == worst)
    return (f"decode is bound by {gpu.name} memory bandwidth ({gpu.memory_bandwidth_gbps:g} GB/s): a smaller quant "
            f"or a GPU with more bandwidth moves it; prefill is bound by tensor throughput")
