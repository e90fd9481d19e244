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
from .hardware_db import GPUAttachment, GPUSpec
from .links import Link, default_attachment, host_link, peer_link
from .model_spec import ModelSpec
from .placement import CPU
from .tensor_plan import TensorPlan, TensorSpec

# Assumed when the user gives no machine file (flagged in the output): a typical desktop.
DEFAULT_RAM_BANDWIDTH_GBPS = 89.6  # DDR5-5600, two 64-bit channels
DEFAULT_DISK_READ_GBPS = 7.0  # NVMe PCIe 4.0 x4 sequential read (hardware_db/storage.yaml nvme-gen4)


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
    load_warm_s: float | None = None  # the file already in the page cache; None: it does not fit in RAM
    per_offloaded_layer_s: float | None = None  # decode seconds per token each layer left on the CPU adds
    interconnect: str | None = None  # the GPU-to-GPU link of a multi-GPU split
    split_modes_decode_tokens_per_s: dict[str, float] | None = None  # layer vs row split, several GPUs


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


@cache
def _attended(n_tokens: int, n_ubatch: int, window: int) -> float:
    """Sum over a prompt's ubatches of (tokens in the ubatch x KV cells its attention reads).

    llama.cpp computes each ubatch's scores against every cell up to the ubatch's end (the causal
    mask zeroes the rest, it does not skip them); a sliding-window layer reads at most its window
    plus the ubatch. window = 0: full attention."""
    total, start = 0.0, 0
    while start < n_tokens:
        u = min(n_ubatch, n_tokens - start)
        end = start + u
        n_kv = min(end, window + n_ubatch) if window else end
        total += u * n_kv
        start = end
    return total


def attention_flops(model: ModelSpec, n_tokens: int, n_ubatch: int) -> dict[int, float]:
    """FLOPs of attention itself (scores Q.K and the weighted sum with V) over a prompt, per layer:
    2 x n_head x head_dim for each of the two products, per (token, attended cell) pair."""
    out = {}
    for layer in model.layers:
        window = model.n_swa if layer.is_swa and model.has_swa else 0
        out[layer.index] = 4.0 * layer.n_head * layer.head_dim * _attended(n_tokens, n_ubatch, window)
    return out


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


@dataclass(frozen=True)
class _DeviceWork:
    """Per-token weight + KV bytes read and matmul FLOPs, and prompt attention FLOPs, by device."""

    read: dict[int, float]
    flops: dict[int, float]
    attn_flops: dict[int, float]
    layers: dict[int, int]


def _device_work(plan: TensorPlan, est: MemoryEstimate, n_gpus: int, prompt_tokens: int) -> _DeviceWork:
    model, placement = plan.model, est.placement
    devices = [*range(n_gpus), CPU]
    read = dict.fromkeys(devices, 0.0)
    flops = dict.fromkeys(devices, 0.0)
    attn = dict.fromkeys(devices, 0.0)
    layers = dict.fromkeys(devices, 0)
    work = _token_work(plan)
    for il, (r, f) in enumerate(work.layers):
        d = placement.layer_device[il]
        read[d] += r
        flops[d] += f
        layers[d] += 1
    read[placement.output_device] += work.output[0]
    flops[placement.output_device] += work.output[1]
    for il, nbytes in _kv_read_per_token(model, est, max(1, prompt_tokens)).items():
        read[placement.layer_device[il] if est.settings.kv_offload else CPU] += nbytes
    for il, f in attention_flops(model, prompt_tokens, est.settings.ubatch).items():
        attn[placement.layer_device[il]] += f
    return _DeviceWork(read, flops, attn, layers)


def _boundaries(layer_device: tuple[int, ...] | list[int]) -> int:
    """Hand-overs of the hidden state between consecutive layers on different devices."""
    return sum(1 for a, b in zip(layer_device, layer_device[1:], strict=False) if a != b)


def _prefill_rate(g: GPUSpec, quantized: bool) -> float:
    """FLOP/s a GPU reaches in prefill: INT8 tensor throughput for quantized weights (MMQ), else FP16."""
    eff, _ = efficiency("prefill", g.backend, "consumer" if "GeForce" in g.name else "pro")
    tops = (g.int8_tensor_tops if quantized else None) or g.fp16_tensor_tflops or 0.0
    return tops * 1e12 * eff


def _attention_rate(g: GPUSpec) -> float:
    """Attention runs in FP16 on the tensor cores (flash attention's MMA kernels or cuBLAS)."""
    eff, _ = efficiency("prefill", g.backend, "consumer" if "GeForce" in g.name else "pro")
    return (g.fp16_tensor_tflops or 0.0) * 1e12 * eff


def predict_performance(plan: TensorPlan, est: MemoryEstimate, gpus: tuple[GPUSpec, ...],
                        prompt_tokens: int, ram_bandwidth_gbps: float | None = None,
                        disk_read_gbps: float | None = None, cpu_cores: int | None = None,
                        attachments: tuple[GPUAttachment, ...] | None = None,
                        ram_bytes: int | None = None) -> Performance:
    if prompt_tokens > est.n_ctx:
        raise SpeedInputError(f"a prompt of {prompt_tokens:,} tokens is longer than the context ({est.n_ctx:,})")
    if prompt_tokens < 1:
        raise SpeedInputError("the prompt must have at least one token")
    missing = [g.name for g in gpus if not g.memory_bandwidth_gbps]
    if missing:
        raise SpeedInputError(f"no memory-bandwidth figure for {', '.join(missing)} in the hardware database")
    attachments = attachments or tuple(default_attachment(g) for g in gpus)
    notes: list[str] = []
    ram_bw = ram_bandwidth_gbps or DEFAULT_RAM_BANDWIDTH_GBPS
    if ram_bandwidth_gbps is None:
        notes.append(f"system memory assumed {DEFAULT_RAM_BANDWIDTH_GBPS} GB/s (DDR5-5600 dual channel); "
                     "give --hardware with ram_type/speed for yours")
    work = _device_work(plan, est, len(gpus), prompt_tokens)
    times = _decode_times(gpus, work, ram_bw, notes)
    peer = peer_link(gpus, attachments)
    transfer_s = _decode_transfer_s(plan.model, est, gpus, peer, attachments)
    if transfer_s:
        times["links"] = transfer_s
    decode_s = sum(times.values())
    host = host_link(attachments[0]) if gpus else None
    prefill_s = _prefill_seconds(plan, est, gpus, work, prompt_tokens, host, peer, cpu_cores, notes)
    prefill_tps = prompt_tokens / prefill_s if prefill_s > 0 else 0.0
    load_cold, load_warm = _load_seconds(plan, est, host, disk_read_gbps, ram_bw, ram_bytes, notes)
    per_cpu_layer = _per_offloaded_layer_s(plan, gpus, work, ram_bw) if gpus else None
    split_modes = _split_mode_decode(plan, est, gpus, work, peer, ram_bw) if peer else {}
    return Performance(
        decode_tokens_per_s=1.0 / decode_s if decode_s > 0 else 0.0,
        prefill_tokens_per_s=prefill_tps,
        ttft_s=prefill_s + decode_s,
        load_s=load_cold,
        bottleneck=_bottleneck(times, gpus, est, peer),
        prompt_tokens=prompt_tokens,
        decode_time_by_device_s=times,
        notes=tuple(notes),
        load_warm_s=load_warm,
        per_offloaded_layer_s=per_cpu_layer,
        interconnect=peer.name if peer else None,
        split_modes_decode_tokens_per_s=split_modes,
    )


def _gpu_decode_s(g: GPUSpec, read_bytes: float, n_layers: int) -> tuple[float, str]:
    eff, per_layer, src = decode_model(g.backend, g.arch)
    bw = (g.memory_bandwidth_gbps or 0) * 1e9 * eff
    return (read_bytes / bw + n_layers * per_layer if bw else float("inf")), f"{eff:.2f} ({src})"


def _decode_times(gpus: tuple[GPUSpec, ...], work: _DeviceWork, ram_bw: float, notes: list[str]) -> dict[str, float]:
    """Seconds per generated token on each device; with a layer split they run one after another."""
    times: dict[str, float] = {}
    for i, g in enumerate(gpus):
        key = g.id if g.id not in times else f"{g.id}#{i}"  # two cards of one kind each take their turn
        times[key], src = _gpu_decode_s(g, work.read[i], work.layers[i])
        if i == 0:
            notes.append(f"decode efficiency {src} of {g.memory_bandwidth_gbps} GB/s")
    cpu_eff, _, cpu_where = cpu_terms()
    if work.read[CPU] > 0 or not gpus:
        times["cpu"] = work.read[CPU] / (ram_bw * 1e9 * cpu_eff)
        notes.append(f"CPU layers decode at {cpu_eff:.0%} of system-memory bandwidth ({cpu_where})")
    return times


def _decode_transfer_s(model: ModelSpec, est: MemoryEstimate, gpus: tuple[GPUSpec, ...], peer: Link | None,
                       attachments: tuple[GPUAttachment, ...]) -> float:
    """Per token, the hidden state (n_embd float32) crosses each device boundary of the layer split."""
    if not gpus:
        return 0.0
    hidden = 4.0 * model.n_embd
    total = 0.0
    devices = list(est.placement.layer_device)
    for a, b in zip(devices, devices[1:], strict=False):
        if a == b:
            continue
        link = host_link(attachments[0]) if CPU in (a, b) or peer is None else peer
        total += link.seconds(hidden)
    return total


def _prefill_seconds(plan: TensorPlan, est: MemoryEstimate, gpus: tuple[GPUSpec, ...], work: _DeviceWork,
                     prompt_tokens: int, host: Link | None, peer: Link | None, cpu_cores: int | None,
                     notes: list[str]) -> float:
    """Compute-bound prompt processing. With a GPU, llama.cpp runs the CPU-resident layers on the GPU
    too for large batches, shipping their weights across PCIe once per ubatch."""
    n_ubatches = -(-prompt_tokens // est.settings.ubatch)
    if not gpus:
        _, gflops_core, where = cpu_terms()
        cores = cpu_cores or 8
        notes.append(f"CPU prefill at {gflops_core:.0f} GFLOP/s per core x {cores} cores ({where})"
                     + ("" if cpu_cores else "; 8 cores assumed"))
        return (work.flops[CPU] * prompt_tokens + work.attn_flops[CPU]) / (gflops_core * cores * 1e9)
    quantized = plan.ftype.default_type.is_quantized
    total = 0.0
    for i, g in enumerate(gpus):
        mm_rate, at_rate = _prefill_rate(g, quantized), _attention_rate(g)
        if not mm_rate or not at_rate:
            return float("inf")
        flops = work.flops[i] + (work.flops[CPU] if i == 0 else 0.0)
        attn = work.attn_flops[i] + (work.attn_flops[CPU] if i == 0 else 0.0)
        total += flops * prompt_tokens / mm_rate + attn / at_rate
    if work.read[CPU] and host is not None:
        total += n_ubatches * host.seconds(work.read[CPU])
    if peer is not None:
        hidden = 4.0 * plan.model.n_embd * est.settings.ubatch
        total += n_ubatches * _boundaries([d for d in est.placement.layer_device if d != CPU]) * peer.seconds(hidden)
    return total


def _per_offloaded_layer_s(plan: TensorPlan, gpus: tuple[GPUSpec, ...], work: _DeviceWork, ram_bw: float) -> float:
    """Decode seconds per token one more repeating layer costs on the CPU instead of the main GPU."""
    layers = _token_work(plan).layers
    layer_bytes = sum(r for r, _ in layers) / len(layers)
    cpu_eff, _, _ = cpu_terms()
    on_cpu = layer_bytes / (ram_bw * 1e9 * cpu_eff)
    on_gpu, _ = _gpu_decode_s(gpus[0], layer_bytes, 1)
    return max(0.0, on_cpu - on_gpu)


def _split_mode_decode(plan: TensorPlan, est: MemoryEstimate, gpus: tuple[GPUSpec, ...], work: _DeviceWork,
                       peer: Link, ram_bw: float) -> dict[str, float]:
    """Decode tokens/s with the layer split (llama.cpp's default, what the memory estimate places) and
    with the row split (-sm row): every GPU reads its share of each weight matrix at the same time,
    and each matrix product is followed by a gather on the main GPU over the GPU-to-GPU link."""
    gpu_read = sum(work.read[i] for i in range(len(gpus)))
    n_gpu_layers = sum(work.layers[i] for i in range(len(gpus)))
    shares = [g.usable_memory_bytes for g in gpus]
    row = max(_gpu_decode_s(g, gpu_read * s / sum(shares), n_gpu_layers)[0] for g, s in zip(gpus, shares, strict=True))
    row += n_gpu_layers * MATMULS_PER_LAYER * peer.seconds(4.0 * plan.model.n_embd)
    cpu_eff, _, _ = cpu_terms()
    row += work.read[CPU] / (ram_bw * 1e9 * cpu_eff)
    layer_s = sum(_gpu_decode_s(g, work.read[i], work.layers[i])[0] for i, g in enumerate(gpus))
    layer_s += work.read[CPU] / (ram_bw * 1e9 * cpu_eff)
    layer_s += _boundaries(list(est.placement.layer_device)) * peer.seconds(4.0 * plan.model.n_embd)
    return {"layer": 1.0 / layer_s, "row": 1.0 / row}


# Weight matrices per layer whose products the row split gathers (q, k, v, output; gate, up, down).
MATMULS_PER_LAYER = 7


def _load_seconds(plan: TensorPlan, est: MemoryEstimate, host: Link | None, disk: float | None, ram_bw: float,
                  ram_bytes: int | None, notes: list[str]) -> tuple[float, float | None]:
    """(cold, warm) load seconds: the file is read from disk (cold) or from the page cache (warm, when
    it fits in RAM) while the GPU's share is uploaded over PCIe; the two overlap, so the slower wins."""
    disk_bw = disk or DEFAULT_DISK_READ_GBPS
    if disk is None:
        notes.append(f"load time from an NVMe Gen4 disk ({DEFAULT_DISK_READ_GBPS} GB/s), cold page cache")
    file_bytes = plan.tensor_data_bytes
    device_bytes = sum(d.weights_bytes for d in est.devices)
    upload = host.seconds(device_bytes) if host is not None and device_bytes else 0.0
    setup = _load_setup_s()
    cold = max(file_bytes / (disk_bw * 1e9), upload) + setup
    if ram_bytes is not None and file_bytes > ram_bytes:
        return cold, None
    cached = file_bytes / (ram_bw * 1e9 * _load_terms()["page_cache_fraction_of_ram"])
    return cold, max(cached, upload) + setup


def _load_terms() -> dict[str, float]:
    """Page-cache read speed as a fraction of RAM bandwidth (measured, benchmarks/measure_load.py) and
    the fixed setup seconds (a budget: backend init, compute-buffer reservation, warm-up)."""
    load = _calibration().get("load") or {}
    return {"page_cache_fraction_of_ram": float(load.get("page_cache_fraction_of_ram", 0.9)),
            "setup_s": float(load.get("setup_s_budget", 0.5))}


def _load_setup_s() -> float:
    return _load_terms()["setup_s"]


def _bottleneck(times: dict[str, float], gpus: tuple[GPUSpec, ...], est: MemoryEstimate,
                peer: Link | None) -> str:
    if not times:
        return "unknown"
    worst = max(times, key=lambda k: times[k])
    if worst == "cpu" and gpus:
        n_cpu = sum(1 for d in est.placement.layer_device if d == CPU)
        return (f"decode waits on system memory: {n_cpu} layers run on the CPU; offloading fewer layers to the "
                f"CPU (a smaller quant or context, or a GPU with more memory) moves it")
    if worst == "cpu":
        return "decode is bound by system-memory bandwidth (CPU only); faster RAM or a GPU moves it"
    if worst == "links":
        return (f"decode waits on the GPU-to-GPU link ({peer.name if peer else 'PCIe'}): fewer GPUs, NVLink "
                "or a card that holds the whole model moves it")
    gpu = gpus[[g.id for g in gpus].index(worst.split("#")[0])]
    text = (f"decode is bound by {gpu.name} memory bandwidth ({gpu.memory_bandwidth_gbps:g} GB/s): a smaller quant "
            f"or a GPU with more bandwidth moves it; prefill is bound by tensor throughput")
    if len(gpus) > 1:
        text += "; with a layer split the GPUs take turns, so their times add up"
    return text
