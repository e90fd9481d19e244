"""From a memory estimate to the go / tight / offload / no-go answer, with reasons and advice."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from .estimate import Device, MemoryEstimate, auto_gpu_layers, context_terms, estimate_memory, max_ctx_fit
from .ggml import CONTRACT_QUANTS
from .model_spec import ModelSpec
from .settings import RunSettings
from .tensor_plan import TensorPlan, build_plan
from .units import fmt_bytes

# llama.cpp's --fit keeps 1024 MiB free per device by default (common/common.h, fit target):
# less headroom than that works, but is "tight".
SAFETY_MARGIN_BYTES = 1024 * 1024**2


@dataclass(frozen=True)
class Verdict:
    verdict: str  # go | tight | offload | no-go
    reasons: tuple[str, ...]
    estimate: MemoryEstimate
    n_gpu_layers: int
    max_ctx_fit: int
    suggestion: str | None  # what would fit if this does not
    server_command: str


def _min_headroom(est: MemoryEstimate) -> int | None:
    rooms = [d.headroom_bytes for d in est.devices]
    if not est.devices and est.host.headroom_bytes is not None:
        rooms.append(est.host.headroom_bytes)
    return min(rooms) if rooms else None


def _fit_reasons(est: MemoryEstimate) -> list[str]:
    out = []
    for d in est.devices:
        verb = "fits" if d.headroom_bytes >= 0 else "does not fit"
        out.append(f"{d.name}: needs {fmt_bytes(d.total_bytes)} of {fmt_bytes(d.capacity_bytes)} ({verb}; "
                   f"weights {fmt_bytes(d.weights_bytes)}, KV {fmt_bytes(d.kv_cache_bytes)}, "
                   f"compute {fmt_bytes(d.compute_bytes)}, overhead {fmt_bytes(d.overhead_bytes)})")
    h = est.host
    if h.capacity_bytes is not None:
        verb = "fits" if h.total_bytes <= h.capacity_bytes else "does not fit"
        out.append(f"host RAM: needs {fmt_bytes(h.total_bytes)} of {fmt_bytes(h.capacity_bytes)} ({verb})")
    return out


def server_command(model: ModelSpec, quant: str, s: RunSettings, n_gpu_layers: int, n_ctx: int,
                   gguf_name: str | None = None) -> str:
    """The llama-server command line for these settings (llama.cpp's own flag names)."""
    name = gguf_name or f"{model.id}-{quant}.gguf"
    args = ["llama-server", "-m", name, "-c", str(n_ctx), "-ngl", str(n_gpu_layers),
            "-fa", "off" if s.flash_attn == "off" else "on", "-b", str(s.n_batch), "-ub", str(s.n_ubatch),
            "-np", str(s.n_parallel)]
    if s.cache_type_k != "f16":
        args += ["--cache-type-k", s.cache_type_k]
    if s.cache_type_v != "f16":
        args += ["--cache-type-v", s.cache_type_v]
    if s.kv_unified:
        args.append("--kv-unified")
    if s.swa_full:
        args.append("--swa-full")
    return shlex.join(args)


def _quant_that_fits(model: ModelSpec, s: RunSettings, devices: tuple[Device, ...],
                     host_capacity: int | None) -> str | None:
    """The largest (best quality) file type whose model fits entirely at these settings."""
    plans = sorted((build_plan(model, q) for q in CONTRACT_QUANTS), key=lambda p: -p.tensor_data_bytes)
    terms = context_terms(model, s)  # the KV cache and compute buffer do not depend on the quant
    n_all = model.n_layer + 1 if devices else 0
    for plan in plans:
        if estimate_memory(plan, s, devices, n_all, host_capacity, terms).fits():
            return plan.ftype.name
    return None


def _suggest(plan: TensorPlan, s: RunSettings, devices: tuple[Device, ...], host_capacity: int | None,
             n_all: int, ctx_fit: int) -> str | None:
    parts = []
    if ctx_fit >= 256:
        parts.append(f"{plan.ftype.name} fits entirely up to --ctx {ctx_fit:,}")
    quant = _quant_that_fits(plan.model, s, devices, host_capacity)
    if quant and quant != plan.ftype.name:
        parts.append(f"at --ctx {s.resolved_ctx(plan.model):,} the largest quant that fits entirely is {quant}")
    if not parts:
        return "no quant fits entirely at any context on this hardware; a GPU with more memory is needed"
    return "; ".join(parts)


def decide(plan: TensorPlan, s: RunSettings, devices: tuple[Device, ...], host_capacity: int | None) -> Verdict:
    model = plan.model
    n_all = model.n_layer + 1 if devices else 0
    auto = s.n_gpu_layers is None
    ngl = auto_gpu_layers(plan, s, devices, host_capacity) if auto else min(s.n_gpu_layers or 0, n_all)
    est = estimate_memory(plan, s, devices, ngl, host_capacity)
    reasons = _fit_reasons(est)
    ctx_fit = max_ctx_fit(plan, s, devices, n_all, host_capacity)
    room = _min_headroom(est)
    if not est.fits():
        verdict = "no-go"
        reasons.insert(0, "does not fit even with every layer on the CPU" if auto and devices
                       else "does not fit with these settings")
    elif devices and ngl < n_all:
        verdict = "offload"
        reasons.insert(0, f"only {ngl} of {n_all} layers fit on the GPU(s); {n_all - ngl} run on the CPU "
                          f"at system-memory speed")
    elif room is not None and room < SAFETY_MARGIN_BYTES:
        verdict = "tight"
        reasons.insert(0, f"fits with {fmt_bytes(room)} to spare, under llama.cpp's 1 GiB fit margin")
    else:
        verdict = "go"
        reasons.insert(0, "fits entirely" + (f" with {fmt_bytes(room)} to spare" if room is not None else ""))
    suggestion = None if verdict in ("go", "tight") else _suggest(plan, s, devices, host_capacity, n_all, ctx_fit)
    if suggestion:
        reasons.append(suggestion)
    cmd = server_command(model, plan.ftype.name, s, ngl, est.n_ctx)
    return Verdict(verdict, tuple(reasons), est, ngl, ctx_fit, suggestion, cmd)


def with_parallel_outputs(s: RunSettings) -> RunSettings:
    """llama-server reserves logits for n_parallel outputs (n_outputs_max = n_parallel)."""
    return replace(s, n_outputs_max=s.n_parallel) if s.n_outputs_max == 0 else s
