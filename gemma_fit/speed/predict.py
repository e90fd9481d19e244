"""Speed: decode and prefill tokens/s, time to first token and load time, with the bottleneck named.

Decode reads, for every token, the weights of each layer (for a mixture of experts only the experts
it routes to) and the KV cache up to the current position, from the memory that holds them, and
pays a fixed cost per llama.cpp graph node (a small kernel each at batch size 1). Prefill multiplies
each ubatch through the weight matrices on the tensor cores (INT8 for quantized weights, llama.cpp's
MMQ kernels; FP16 otherwise), streams the activations through the other graph nodes, and computes
attention over the prompt. Efficiencies and fixed costs are calibrated on published llama-bench runs
(gemma_fit/speed_terms.py). With several GPUs the layer split runs the GPUs in turn and hands the
hidden state across each boundary (gemma_fit/links.py).
"""

from __future__ import annotations

from typing import Any

from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import GPUAttachment, GPUSpec, Hardware
from gemma_fit.memory.estimate import MemoryEstimate
from gemma_fit.memory.placement import CPU
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.calibration import clear_gpu_cache, decode_model, split_terms
from gemma_fit.speed.cpu import (
    CPURates,
    cpu_decode_s,
    cpu_of,
    decode_bandwidth_gbps,
    hybrid_split_s,
    system_bandwidth_gbps,
    thread_bound,
)
from gemma_fit.speed.graph import graph_nodes
from gemma_fit.speed.links import Link, default_attachment, host_link, peer_link
from gemma_fit.speed.load import load_bottleneck, load_seconds
from gemma_fit.speed.prefill import handovers, loops_from_host, prefill_seconds
from gemma_fit.speed.rates import idle_matrix_units, uses_matrix_units
from gemma_fit.speed.traffic import Serving
from gemma_fit.speed.vector import decode_flops_per_weight, vector_pass_s
from gemma_fit.speed.work import DeviceWork, LayerWork, attended_kv, device_work, token_work


@record
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
    split_modes_decode_tokens_per_s: dict[str, float] | None = None  # layer / row / tensor split, several GPUs
    load_bottleneck: str = ""  # what bounds the cold load, and what would move it
    serving: Serving | None = None  # many requests at once (speed.traffic): aggregate tokens/s and the traffic
    speculative: dict[str, Any] | None = None  # with a drafter (engines.speculative): the contract's block

    @property
    def aggregate_tokens_per_s(self) -> float:
        """All sequences together at --parallel N (one sequence: the decode speed)."""
        return self.serving.aggregate_tokens_per_s if self.serving else self.decode_tokens_per_s


class SpeedInputError(ValueError):
    """Speed cannot be predicted (the memory verdict still stands)."""


_PERF: dict[tuple[object, ...], tuple[TensorPlan, Hardware, Performance]] = {}
_PERF_MAX = 8192  # a report asks one plan on one machine at every context: where the placement holds, one answer


def clear_speed_cache() -> None:
    """Forget every cached prediction: for code that changes the calibration tables in place (the fit scripts)."""
    _PERF.clear()
    clear_gpu_cache()


def predict_performance(plan: TensorPlan, est: MemoryEstimate, hardware: Hardware, prompt_tokens: int,
                        depth: int = 0) -> Performance:
    """Decode and prefill speed, time to first token and load time of this plan on this hardware; the prompt follows
    `depth` tokens already in the cache (0: a fresh conversation). Cached by what the prediction reads of the
    estimate: its settings but the context, the placement, the weights per device and the KV bytes each layer
    attends at this position (a longer context changes none of these until the placement moves)."""
    if prompt_tokens + depth > est.n_ctx or prompt_tokens < 1:
        return _predict(plan, est, hardware, prompt_tokens, depth)  # raises SpeedInputError
    attended = attended_kv(plan.model, est, max(1, depth + prompt_tokens))
    key = (id(plan), id(hardware), prompt_tokens, depth, est.settings.with_ctx(0), est.placement,
           tuple(d.weights_bytes for d in est.devices), attended)
    hit = _PERF.get(key)
    if hit is not None and hit[0] is plan and hit[1] is hardware:
        return hit[2]
    perf = _predict(plan, est, hardware, prompt_tokens, depth)
    if len(_PERF) >= _PERF_MAX:
        _PERF.clear()
    _PERF[key] = (plan, hardware, perf)
    return perf


def _predict(plan: TensorPlan, est: MemoryEstimate, hardware: Hardware, prompt_tokens: int,
             depth: int = 0) -> Performance:
    gpus = hardware.gpus
    disk = hardware.disk
    disk_read_gbps = disk.sequential_read_gbps if disk else None
    attachments = hardware.attachments
    ram_bytes = hardware.host_capacity_bytes
    if prompt_tokens + depth > est.n_ctx:
        raise SpeedInputError(f"a prompt of {prompt_tokens:,} tokens is longer than the context ({est.n_ctx:,})")
    if prompt_tokens < 1:
        raise SpeedInputError("the prompt must have at least one token")
    missing = [g.name for g in gpus if not g.memory_bandwidth_gbps]
    if missing:
        raise SpeedInputError(f"no memory-bandwidth figure for {', '.join(missing)} in the hardware database")
    attachments = attachments or tuple(default_attachment(g) for g in gpus)
    notes: list[str] = []
    rates = cpu_of(hardware)
    ram_bw = system_bandwidth_gbps(hardware, rates, notes)
    work = device_work(plan, est, len(gpus), prompt_tokens, depth)
    times = _decode_times(gpus, work, ram_bw, rates, notes, plan.model)
    kernel_bound = [g.name for i, g in enumerate(gpus)
                    if _kernel_bound(g, work.work[i], work.nodes[i], work.kv_read[i])]
    peer = peer_link(gpus, attachments)
    transfer_s = _decode_transfer_s(plan.model, est, gpus, peer, attachments)
    if transfer_s:
        times["links"] = transfer_s
    decode_s = sum(times.values())
    host = host_link(attachments[0]) if gpus else None
    prefill_s = prefill_seconds(plan, est, gpus, work, prompt_tokens, host, peer, rates, notes)
    load_cold, load_warm = load_seconds(plan, est, host, disk_read_gbps, ram_bw, ram_bytes, notes)
    modes = _split_modes(gpus, work, decode_s, times) if peer else {}
    decode_s, prefill_s = _calibrated(hardware, decode_s, prefill_s, notes)
    return Performance(
        decode_tokens_per_s=1.0 / decode_s if decode_s > 0 else 0.0,
        prefill_tokens_per_s=prompt_tokens / prefill_s if prefill_s > 0 else 0.0,
        ttft_s=prefill_s + decode_s,
        load_s=load_cold,
        bottleneck=_bottleneck(times, gpus, est, peer, kernel_bound, work, modes,
                               rates.threads if thread_bound(ram_bw, rates) else None,
                               rates.cpu.performance_cores),
        prompt_tokens=prompt_tokens,
        decode_time_by_device_s=times,
        notes=tuple(notes),
        load_warm_s=load_warm,
        per_offloaded_layer_s=_per_offloaded_layer_s(plan, gpus, ram_bw, rates) if gpus else None,
        interconnect=peer.name if peer else None,
        split_modes_decode_tokens_per_s=modes,
        load_bottleneck=load_bottleneck(plan, est, host, disk_read_gbps),
    )


def _calibrated(hardware: Hardware, decode_s: float, prefill_s: float, notes: list[str]) -> tuple[float, float]:
    """Decode and prefill seconds with this machine's own measurements applied (gemma-fit bench --save), said so."""
    cal = hardware.speed_calibration
    if cal is None:
        return decode_s, prefill_s
    applied = []
    if cal.decode_factor:
        decode_s /= cal.decode_factor
        applied.append(f"decode x{cal.decode_factor:.3g}")
    if cal.prefill_factor:
        prefill_s /= cal.prefill_factor
        applied.append(f"prefill x{cal.prefill_factor:.3g}")
    if cal.batched_factors:
        applied.append("batched decode " + ", ".join(f"x{f:.3g} at {n}" for n, f in cal.batched_factors))
    notes.append(f"{cal.label}: {', '.join(applied)} on the model's figures")
    return decode_s, prefill_s


# --- decode ------------------------------------------------------------------------------------

def _gpu_decode_s(g: GPUSpec, weights: LayerWork, n_nodes: float, kv_bytes: float = 0.0) -> tuple[float, str]:
    """Seconds per token on one GPU: its weights (`weights.read_bytes`, or their matrix-vector arithmetic where that
    binds) and KV cache (`kv_bytes`) each at their share of the bandwidth, plus its graph's kernels."""
    m = decode_model(g)
    moved = _moved_s(g, weights, kv_bytes)
    kv = f", KV cache {m.kv_share():.2f}" if m.kv_efficiency else ""
    return moved + n_nodes * m.seconds_per_node, (f"{m.efficiency:.2f} ({m.source}){kv} + "
                                                  f"{1e6 * m.seconds_per_node:.2f} us per kernel")


def _moved_s(g: GPUSpec, weights: LayerWork, kv_bytes: float) -> float:
    """Seconds one GPU spends on a token's weights and KV cache: the weights' read at its share of the bandwidth, or
    their matrix-vector arithmetic where the chip's kernels are bound by it (vector.vector_pass_s), whichever is
    longer; the KV cache at its own share."""
    bw = (g.memory_bandwidth_gbps or 0) * 1e9
    if not bw:
        return float("inf")
    read = max(_read_s(g, weights), vector_pass_s(g, weights.read_weights))
    return read + kv_bytes / (bw * decode_model(g).kv_share())


def _read_s(g: GPUSpec, weights: LayerWork) -> float:
    """Seconds reading a token's weights at the GPU's decode share of its bandwidth (which needs a bandwidth)."""
    return weights.read_bytes / ((g.memory_bandwidth_gbps or 0) * 1e9 * decode_model(g).efficiency)


def _kernel_bound(g: GPUSpec, weights: LayerWork, n_nodes: float, kv_bytes: float = 0.0) -> bool:
    """The graph's kernels cost more per token than moving the bytes."""
    moved = _moved_s(g, weights, kv_bytes)
    return moved != float("inf") and n_nodes * decode_model(g).seconds_per_node > moved


def _decode_times(gpus: tuple[GPUSpec, ...], work: DeviceWork, ram_bw: float, rates: CPURates,
                  notes: list[str], model: ModelSpec) -> dict[str, float]:
    """Seconds per generated token on each device; with a layer split they run one after another."""
    times: dict[str, float] = {}
    for i, g in enumerate(gpus):
        key = g.id if g.id not in times else f"{g.id}#{i}"  # two cards of one kind each take their turn
        times[key], src = _gpu_decode_s(g, work.work[i], work.nodes[i], work.kv_read[i])
        if i == 0:
            notes.append(f"decode efficiency {src} of {g.memory_bandwidth_gbps} GB/s")
    if work.read(CPU) > 0 or not gpus:
        # only a CPU-only build repacks the experts (expert_read_share): with a GPU backend llama.cpp keeps
        # CPU-resident weights in the GPU's host buffer, ahead of the CPU's repack buffers (make_cpu_buft_list)
        expert = 0.0 if gpus else _expert_read(work.work[CPU], model)
        times["cpu"] = cpu_decode_s(work.read(CPU), ram_bw, rates, expert)
        _, how = decode_bandwidth_gbps(ram_bw, rates)
        notes.append(f"CPU layers decode at {how}; CPU: {rates.cpu.name} ({rates.how})")
    split = hybrid_split_s(sum(work.nodes[i] for i in range(len(gpus))), work.cpu_expert_layers) if gpus else 0.0
    if split:
        times["split"] = split
        notes.append(f"routed experts of {work.cpu_expert_layers} layers in system memory split each of them between "
                     f"GPU and CPU: {split * 1e3:.1f} ms per token (model_db/llamacpp/hybrid_decode.yaml)")
    return times


def _expert_read(w: LayerWork, model: ModelSpec) -> float:
    """Bytes of routed-expert weights one token reads from w's matrices (the routed share of all of them)."""
    return w.expert_bytes * model.n_expert_used / model.n_expert if model.n_expert else 0.0


def _decode_transfer_s(model: ModelSpec, est: MemoryEstimate, gpus: tuple[GPUSpec, ...], peer: Link | None,
                       attachments: tuple[GPUAttachment, ...]) -> float:
    """Per token: the hidden state (n_embd float32) crosses each device boundary of the layer split,
    and the logits (n_vocab float32: 1 MiB for Gemma's 262k vocabulary) come back to the host from
    the GPU that holds the output layer, unless that GPU shares the host's memory."""
    if not gpus:
        return 0.0
    hidden = 4.0 * model.n_embd
    total = 0.0
    for a, b in handovers(list(est.placement.layer_device)):
        link = host_link(attachments[0]) if CPU in (a, b) or peer is None else peer
        total += link.seconds(hidden)
    out = est.placement.output_device
    if out != CPU and not gpus[out].unified_memory:
        total += host_link(attachments[out]).seconds(4.0 * model.n_vocab)
    return total


def _per_offloaded_layer_s(plan: TensorPlan, gpus: tuple[GPUSpec, ...], ram_bw: float, rates: CPURates) -> float:
    """Decode seconds per token one more repeating layer costs on the CPU instead of the main GPU."""
    layers = token_work(plan).layers
    layer_bytes = sum(lw.read_bytes for lw in layers) / len(layers)
    layer = LayerWork(read_bytes=layer_bytes, read_weights=sum(lw.read_weights for lw in layers) / len(layers))
    on_gpu, _ = _gpu_decode_s(gpus[0], layer, graph_nodes(plan.model).kernels / plan.model.n_layer)
    return max(0.0, cpu_decode_s(layer_bytes, ram_bw, rates) - on_gpu)


def _split_modes(gpus: tuple[GPUSpec, ...], work: DeviceWork, layer_s: float,
                 times: dict[str, float]) -> dict[str, float]:
    """Decode tokens/s of llama.cpp's three ways to spread a model over GPUs. layer (the default, and
    what the memory estimate places): GPUs take turns. row (-sm row): every GPU reads its share of
    each matrix at once, then the main GPU gathers each product. tensor (-sm tensor): shares of
    weights and KV, two all-reduces per layer. Gather and all-reduce costs are measured figures from
    published multi-GPU runs (benchmarks/data/multigpu_llamabench.csv)."""
    terms = split_terms()
    n = len(gpus)
    gpu_s = sum(v for k, v in times.items() if k not in ("cpu", "links", "split"))
    rest = layer_s - gpu_s  # CPU layers and transfers stay as they are
    matmuls = sum(work.matmul_nodes[i] for i in range(n))
    layers = sum(work.layers[i] for i in range(n))
    return {"layer": 1.0 / layer_s,
            "row": 1.0 / (gpu_s / n + matmuls * terms["row_gather_s"] + rest),
            "tensor": 1.0 / (gpu_s / n + 2 * layers * terms["tensor_allreduce_s"] + rest)}


# --- bottleneck --------------------------------------------------------------------------------

def _arithmetic_clause(gpu: GPUSpec, weights: LayerWork) -> str:
    """What binds decode where a token's matrix-vector arithmetic outlasts its read (vector.vector_pass_s), else
    the empty string."""
    if not gpu.memory_bandwidth_gbps or vector_pass_s(gpu, weights.read_weights) <= _read_s(gpu, weights):
        return ""
    return (f"{gpu.name}'s arithmetic, not its memory: its matrix-vector kernels unpack every weight in FP32 (about "
            f"{decode_flops_per_weight(gpu):.0f} operations a weight, fitted on published runs), so a smaller quant "
            "saves little time and more bandwidth none; a newer chip moves it")


def _expert_loop_clause(gpu: GPUSpec, work: DeviceWork, ubatch: int) -> str:
    """What the prompt's experts cost where the backend multiplies them one by one from the host, and what avoids it."""
    matrices = [m for ms in (work.expert_matrices or {}).values() for m in ms]
    if not any(loops_from_host(gpu.backend, gpu.arch or "", m, ubatch) for m in matrices):
        return ""
    if gpu.backend == "sycl":
        return "its experts, which SYCL multiplies one by one from the host (--backend vulkan runs them in one kernel)"
    return ("its F16/BF16 experts, multiplied one GEMM per expert from the host at this ubatch (ggml-cuda's fallback "
            "past what its MMF kernel takes; a quantized file's run in one kernel)")


def _bottleneck(times: dict[str, float], gpus: tuple[GPUSpec, ...], est: MemoryEstimate,
                peer: Link | None, kernel_bound: list[str], work: DeviceWork, modes: dict[str, float],
                cpu_threads_bound: int | None = None, performance_cores: int | None = None) -> str:
    if not times:
        return "unknown"
    worst = max(times, key=lambda k: times[k])
    if worst in ("cpu", "split") and work.cpu_expert_layers:
        return (f"decode waits on the routed experts of {work.cpu_expert_layers} layers in system memory (read there "
                "and synchronised with the GPU each layer); fewer layers with experts on the CPU (--n-cpu-moe, a "
                "smaller quant or context, or a GPU with more memory) moves it")
    if worst == "cpu" and gpus:
        n_cpu = sum(1 for d in est.placement.layer_device if d == CPU)
        return (f"decode waits on system memory: {n_cpu} layers run on the CPU; offloading fewer layers to the "
                f"CPU (a smaller quant or context, or a GPU with more memory) moves it")
    if worst == "cpu" and cpu_threads_bound and performance_cores and cpu_threads_bound >= performance_cores:
        return (f"decode is bound by the CPU's {cpu_threads_bound} threads on its performance cores, not the memory: "
                "each draws only so much bandwidth, and the efficiency cores llama.cpp's default -t leaves out draw "
                "less; a GPU moves it")
    if worst == "cpu" and cpu_threads_bound:
        return (f"decode is bound by the CPU's {cpu_threads_bound} threads, not the memory: each draws only so much "
                "bandwidth; more threads (-t, up to the physical cores) or a GPU moves it")
    if worst == "cpu":
        return "decode is bound by system-memory bandwidth (CPU only); faster RAM or a GPU moves it"
    if worst == "links":
        return (f"decode waits on the links ({peer.name if peer else 'PCIe'}): fewer GPUs, NVLink or a card that "
                "holds the whole model moves it")
    gpu = gpus[[g.id for g in gpus].index(worst.split("#")[0])]
    if gpu.name in kernel_bound:
        n_nodes = round(sum(work.nodes[i] for i in range(len(gpus))))
        return (f"decode is bound by kernel overhead on {gpu.name}: the model's {n_nodes:,} kernels cost more "
                "per token than reading its weights; a GPU with a higher clock moves it, more bandwidth does not, "
                "and serving several requests at once (--parallel) raises total throughput")
    units = "tensor throughput" if uses_matrix_units(gpu) else "arithmetic on the shader cores (no matrix units in use)"
    i = [g.id for g in gpus].index(gpu.id)
    arithmetic = _arithmetic_clause(gpu, work.work[i])
    # an Arc A-series card through Vulkan: SYCL reaches its XMX units (not for a mixture of experts, whose experts SYCL
    # multiplies one by one from the host: prefill.loops_from_host)
    if idle_matrix_units(gpu) and not any((work.expert_matrices or {}).values()):
        units += f"; {gpu.name}'s matrix units sit idle under Vulkan, --backend sycl uses them"
    loop = _expert_loop_clause(gpu, work, est.settings.ubatch)
    units += f", and waits on {loop}" if loop else ""
    text = (f"decode is bound by {arithmetic}; prefill is bound by {units}" if arithmetic else
            f"decode is bound by {gpu.name} memory bandwidth ({gpu.memory_bandwidth_gbps:g} GB/s): a smaller quant "
            f"or a GPU with more bandwidth moves it; prefill is bound by {units}")
    if len(gpus) > 1:
        text += "; with a layer split the GPUs take turns, so their times add up"
        best = max(modes, key=lambda k: modes[k]) if modes else "layer"
        if best != "layer":
            text += (f"; -sm {best} would share the reading ({modes[best]:.1f} vs {modes['layer']:.1f} tokens/s over "
                     f"{peer.name if peer else 'PCIe'}; NVLink would shorten each of its synchronisations)")
    return text
