"""From a memory estimate to llama.cpp's plan and its go / tight / offload / no-go answer (`Fit`), with reasons."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from gemma_fit.base.record import record
from gemma_fit.base.units import fmt_bytes
from gemma_fit.base.verdict import Verdict
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import MAX_GPUS_PER_CONTEXT, MAX_HOST_RAM_BYTES, GPUSpec
from gemma_fit.memory.estimate import MemoryEstimate, estimate_memory, fits
from gemma_fit.memory.placement import moved_bytes_by_layer
from gemma_fit.memory.search import auto_gpu_layers, experts_to_cpu, max_ctx_fit, quant_that_fits
from gemma_fit.memory.settings import RunSettings
from gemma_fit.memory.unified import UnifiedPool, unified_device
from gemma_fit.model.spec import ModelSpec

# llama.cpp's --fit keeps 1024 MiB free per device by default (common/common.h, fit target):
# less headroom than that works, but is "tight".
SAFETY_MARGIN_BYTES = 1024 * 1024**2


@record
class Fit:
    """llama.cpp's plan for one model, settings and hardware: the estimate, the layers on the GPU(s), the largest
    context, the answer and why, and the llama-server command that runs it."""

    verdict: Verdict
    reasons: tuple[str, ...]
    estimate: MemoryEstimate
    n_gpu_layers: int
    max_ctx_fit: int
    suggestion: str | None  # what would fit if this does not
    server_command: str
    unchecked: tuple[str, ...] = ()  # capacities not checked because unknown: "host_ram"
    max_ctx_fit_limit: str = "memory"  # what stops max_ctx_fit: "memory" or "n_ctx_train" (the trained context)
    auto_n_cpu_moe: int = 0  # layers whose routed experts -ngl auto put in system memory (0: none moved)


def _min_headroom(est: MemoryEstimate) -> int | None:
    rooms = [d.headroom_bytes for d in est.devices]
    if est.unified_pool is not None:
        rooms.append(est.unified_pool.headroom_bytes)
    elif not est.devices and est.host.headroom_bytes is not None:
        rooms.append(est.host.headroom_bytes)
    return min(rooms) if rooms else None


def _pool_reason(pool: UnifiedPool) -> str:
    verb = "fits" if pool.headroom_bytes >= 0 else "does not fit"
    budget = "" if pool.platform.reserve_measured else ", a budget, not measured"
    shared = (f", less {fmt_bytes(pool.shared_bytes)} of mapped weights both sides use (one set of pages)"
              if pool.shared_bytes else "")
    return (f"unified memory ({pool.platform.name}): needs {fmt_bytes(pool.total_bytes)} of "
            f"{fmt_bytes(pool.capacity_bytes)} ({verb}; GPU side {fmt_bytes(pool.gpu_bytes)} of its "
            f"{fmt_bytes(pool.gpu_limit_bytes)} limit, host side {fmt_bytes(pool.host_bytes)}{shared}; "
            f"{fmt_bytes(pool.platform.reserve_bytes)} kept for the OS{budget})")


def unified_lever(plan: TensorPlan, s: RunSettings, gpu: GPUSpec, est: MemoryEstimate) -> str | None:
    """Where the GPU's own ceiling, not the pool, keeps layers off the GPU: the setting that raises
    it, with the value that puts every layer on the GPU and keeps llama.cpp's margin."""
    pool = est.unified_pool
    if pool is None or not pool.platform.lever:
        return None
    full = estimate_memory(plan, s, (gpu,), plan.model.n_layer + 1, None)
    assert full.unified_pool is not None
    need = full.unified_pool.gpu_bytes + SAFETY_MARGIN_BYTES
    if need <= pool.gpu_limit_bytes or full.unified_pool.headroom_bytes < 0 or need > pool.capacity_bytes:
        return None
    return (f"the GPU limit ({pool.platform.gpu_limit}) keeps layers off the GPU; "
            f"{pool.platform.lever_for(need)} raises it to {fmt_bytes(need)}, enough for every layer with a "
            "1 GiB margin")


def _fit_reasons(est: MemoryEstimate) -> list[str]:
    out = []
    for d in est.devices:
        verb = "fits" if d.headroom_bytes >= 0 else "does not fit"
        out.append(f"{d.name}: needs {fmt_bytes(d.total_bytes)} of {fmt_bytes(d.capacity_bytes)} ({verb}; "
                   f"weights {fmt_bytes(d.weights_bytes)}, KV {fmt_bytes(d.kv_cache_bytes)}, "
                   f"compute {fmt_bytes(d.compute_bytes)}, overhead {fmt_bytes(d.overhead_bytes)})")
    if est.unified_pool is not None:
        out.append(_pool_reason(est.unified_pool))
    h = est.host
    if h.capacity_bytes is not None:
        verb = "fits" if h.total_bytes <= h.capacity_bytes else "does not fit"
        out.append(f"host RAM: needs {fmt_bytes(h.total_bytes)} of {fmt_bytes(h.capacity_bytes)} ({verb})")
    return out


FA_VALUE_SINCE = 6325  # -fa takes on/off/auto from b6325 (llama.cpp PR #15434); before, a bare switch


LLAMA_DRAFT_MAX = 3  # common_params_speculative_draft.n_max: drafts per step when --spec-draft-n-max is not given


def _fa_args(s: RunSettings) -> list[str]:
    """-fa as the answer's llama.cpp version parses it: "-fa on|off", or before b6325 the bare switch (or nothing)."""
    on = s.flash_attn != "off"
    build = s.engine_version.rsplit(" b", 1)[-1] if " b" in s.engine_version else ""
    if build.isdigit() and int(build) < FA_VALUE_SINCE:
        return ["-fa"] if on else []
    return ["-fa", "on" if on else "off"]


# llama.cpp's device names by backend (ggml's backend registry): the first GPU of each is <prefix>0
DEVICE_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "metal": "MTL", "sycl": "SYCL"}


_SHELL_SAFE = re.compile(r"[\w@%+=:,./ -]*", re.ASCII)  # shlex.quote's safe characters, and the separating space


def _shell_join(args: list[str]) -> str:
    """shlex.join: the same string, without quoting word by word when no word needs it (a report prints ~400k)."""
    line = " ".join(args)
    if all(args) and line.count(" ") == len(args) - 1 and _SHELL_SAFE.fullmatch(line):
        return line
    return shlex.join(args)


def server_command(model: ModelSpec, quant: str, s: RunSettings, n_gpu_layers: int, n_ctx: int,
                   gguf_name: str | None = None, draft_device: str | None = None) -> str:
    """The llama-server command line for these settings (llama.cpp's own flag names)."""
    name = gguf_name or f"{model.id}-{quant}.gguf"
    args = ["llama-server", "-m", name, "-c", str(n_ctx), "-ngl", str(n_gpu_layers), *_fa_args(s),
            "-b", str(s.n_batch), "-ub", str(s.n_ubatch), "-np", str(s.n_parallel)]
    if s.cache_type_k != "f16":
        args += ["--cache-type-k", s.cache_type_k]
    if s.cache_type_v != "f16":
        args += ["--cache-type-v", s.cache_type_v]
    if s.kv_unified:
        args.append("--kv-unified")
    if s.swa_full:
        args.append("--swa-full")
    args += s.placement_args()
    if s.mmproj_path:
        args += ["--mmproj", s.mmproj_path]
    if s.speculative is not None:  # llama.cpp's spelling since the speculative options took the --spec- prefix
        sp = s.speculative
        args += ["-md", sp.draft_file, "--spec-type", "draft-mtp" if sp.method == "mtp" else "draft-simple",
                 "--spec-draft-n-max", str(sp.draft_max or LLAMA_DRAFT_MAX)]
        if draft_device:  # several GPUs: the drafter on the main one, as the estimate counts it
            args += ["--spec-draft-device", draft_device]
    return _shell_join(args)


def _suggest(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], host_capacity: int | None,
             n_all: int, ctx_fit: int, ctx_capped: bool) -> str | None:
    parts = []
    if ctx_fit >= 256:
        cap = " (its trained context)" if ctx_capped else ""
        parts.append(f"{plan.ftype.name} fits entirely up to --ctx {ctx_fit:,}{cap}")
    quant = quant_that_fits(plan.model, s, devices, host_capacity)
    if quant and quant != plan.ftype.name:
        parts.append(f"at --ctx {s.resolved_ctx(plan.model):,} the largest quant that fits entirely is {quant}")
    if not parts:
        return "no quant fits entirely at any context on this hardware; a GPU with more memory is needed"
    return "; ".join(parts)


def _ctx_cap(model: ModelSpec, s: RunSettings) -> int:
    """Where max_ctx_fit stops: the trained context, in the search's steps (256 tokens per sequence)."""
    step = 256 * (1 if s.kv_unified else s.n_parallel)
    return model.n_ctx_train // step * step


def _context_notes(model: ModelSpec, s: RunSettings, n_ctx: int, ctx_fit: int) -> list[str]:
    """What the context numbers mean where the trained context, not memory, sets them."""
    notes = []
    n_train = model.n_ctx_train
    if s.n_ctx and s.ctx_per_stream(model) > n_train:  # (--ctx 0 is the trained context, padded to 256)
        # llama.cpp allocates the KV cache for the whole --ctx (llama_context warns "possible training
        # context overflow"); llama-server then caps each slot at n_ctx_train (server-context.cpp
        # n_ctx_slot(): "the slot context exceeds the training context of the model - capping").
        per_slot = "" if s.n_parallel == 1 else " per slot"
        note = (f"--ctx {s.n_ctx:,} is past the model's trained context of {n_train:,} tokens{per_slot}: "
                f"llama-server still allocates the KV cache for {n_ctx:,} tokens (the memory above) but caps "
                f"each slot at {n_train:,} tokens")
        if not s.kv_unified or s.n_parallel == 1:
            same = n_train * (1 if s.kv_unified else s.n_parallel)
            note += f"; --ctx {same} gives the same usable context with less memory"
        scale = -(-s.ctx_per_stream(model) // n_train)  # RoPE positions stretched by this factor, rounded up
        note += (f". Past {n_train:,} tokens the model was not trained to attend; llama.cpp would need RoPE "
                 f"scaling and the cap lifted: --rope-scaling yarn --rope-scale {scale} --yarn-orig-ctx {n_train} "
                 f"--override-kv {model.arch}.context_length=int:{s.ctx_per_stream(model)} (quality there is "
                 "unmeasured)")
        notes.append(note)
    if s.images and s.image_tokens:
        need, slot = s.images * s.image_tokens, min(s.ctx_per_stream(model), n_train)
        verb = "more than" if need > slot else "of"
        notes.append(f"{s.images} image(s) per prompt take {need:,} tokens of the context ({s.image_tokens} each), "
                     f"{verb} the {slot:,} a slot holds")
    if s.n_parallel > 1:
        slot_tokens = min(s.ctx_per_stream(model), n_train)
        if s.kv_unified:
            notes.append(f"-np {s.n_parallel} with --kv-unified: the {s.n_parallel} slots share one pool of "
                         f"{n_ctx:,} cells; one slot alone may use up to {slot_tokens:,} tokens")
        else:
            notes.append(f"-np {s.n_parallel} splits -c {n_ctx:,}: each of the {s.n_parallel} slots holds "
                         f"{slot_tokens:,} tokens (--kv-unified shares one pool instead)")
    if ctx_fit > 0 and ctx_fit == _ctx_cap(model, s):
        notes.append(f"the largest context that fits, {ctx_fit:,} tokens, is the model's trained context: a cap "
                     f"(llama-server uses no more per slot), not a memory limit")
    return notes


def _layers_reason(ngl: int, n_all: int, asked: int | None, fit_ngl: int, host_unchecked: int | None) -> str:
    """The offload headline: how many layers are where, who chose that, and what was not checked."""
    on_cpu = f"{n_all - ngl} run on the CPU at system-memory speed"
    if host_unchecked is not None:
        on_cpu += f" (needing {fmt_bytes(host_unchecked)} of system memory, not checked)"
    if asked is None:
        return f"only {ngl} of {n_all} layers fit on the GPU(s); {on_cpu}"
    text = f"{ngl} of {n_all} layers on the GPU(s) as asked (-ngl {asked}); {on_cpu}"
    if fit_ngl > ngl:
        more = f"all {n_all}" if fit_ngl >= n_all else f"{fit_ngl}"
        text += f"; {more} would fit on the GPU(s) (-ngl {fit_ngl})"
    return text


def _expert_plan(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], search_host: int | None,
                 margin_bytes: int) -> RunSettings | None:
    """-ngl auto on a mixture-of-experts model that does not fit on the GPU(s): every layer there and the
    routed experts of as few layers as possible in system memory, what llama.cpp's fit and every guide
    choose over moving whole layers."""
    if not devices or s.n_gpu_layers is not None or s.has_overrides or plan.model.n_expert == 0:
        return None
    n_all = plan.model.n_layer + 1
    if fits(plan, s, devices, n_all, search_host):  # estimate_memory(...).fits(), without building it
        return None
    n_cpu = experts_to_cpu(plan, s, devices, search_host, margin_bytes)
    return replace(s, n_cpu_moe=n_cpu) if n_cpu else None


def _margin_warning(est: MemoryEstimate, margin_bytes: int) -> str | None:
    short = [d for d in est.devices if d.headroom_bytes < margin_bytes]
    if not short:
        return None
    d = min(short, key=lambda x: x.headroom_bytes)
    return (f"{d.name} keeps {fmt_bytes(d.headroom_bytes)} free, under the {fmt_bytes(margin_bytes)} margin "
            "(--margin; a display, a browser or CUDA's lazy allocations take more): an explicit -ngl also "
            "switches off llama.cpp's own fit")


def decide(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], host_capacity: int | None,
           gguf_name: str | None = None, margin_bytes: int = SAFETY_MARGIN_BYTES, explain: bool = True) -> Fit:
    """llama.cpp's plan and its answer. `host_capacity` None means the system RAM is unknown (--gpu ID without a machine
    file): it is then not checked, the answer says so (reasons, `unchecked`), and a host side larger
    than any machine has (MAX_HOST_RAM_BYTES) is no-go. `gguf_name`: the model file as the user gave it,
    for the llama-server command. `explain` False leaves out the suggestion of what would fit instead (and the
    unified-memory lever), the accounting lines and the context notes, for answers that never show them (a
    compact report cell): the verdict, its headline reason, placement and command are the same."""
    model = plan.model
    n_all = model.n_layer + 1 if devices else 0
    auto = s.n_gpu_layers is None
    host_known = host_capacity is not None or unified_device(devices) is not None  # one memory: the pool
    # Searches for what would fit stop at the most RAM a machine can have when this one's is unknown.
    search_host = host_capacity if host_known else MAX_HOST_RAM_BYTES
    experts = _expert_plan(plan, s, devices, search_host, margin_bytes)
    if experts is not None:
        s = experts
    fit_ngl = n_all if experts else auto_gpu_layers(plan, s, devices, host_capacity, margin_bytes) if devices else 0
    ngl = fit_ngl if auto else min(s.n_gpu_layers or 0, n_all)
    est = estimate_memory(plan, s, devices, ngl, host_capacity)
    reasons = _fit_reasons(est) if explain else []  # the accounting, one line per device
    ctx_fit = max_ctx_fit(plan, s, devices, n_all, search_host)
    ctx_capped = ctx_fit > 0 and ctx_fit == _ctx_cap(model, s)
    room = _min_headroom(est)
    host_need = est.host.total_bytes
    unchecked: tuple[str, ...] = () if host_known else ("host_ram",)
    if len(devices) > MAX_GPUS_PER_CONTEXT:
        verdict = Verdict.NO_GO
        reasons.insert(0, f"llama.cpp runs a model on at most {MAX_GPUS_PER_CONTEXT} GPUs: its scheduler takes "
                          f"{MAX_GPUS_PER_CONTEXT + 1} backends, the CPU among them (GGML_SCHED_MAX_BACKENDS); "
                          f"pick {MAX_GPUS_PER_CONTEXT} with CUDA_VISIBLE_DEVICES")
    elif not host_known and host_need > MAX_HOST_RAM_BYTES:
        verdict = Verdict.NO_GO
        reasons.insert(0, f"the host side needs {fmt_bytes(host_need)} of system memory, more than any machine has "
                          f"(at most {fmt_bytes(MAX_HOST_RAM_BYTES)})")
    elif not est.fits():
        verdict = Verdict.NO_GO
        if est.unified_pool is not None and est.unified_pool.headroom_bytes < 0:
            reasons.insert(0, f"does not fit in unified memory: needs {fmt_bytes(est.unified_pool.total_bytes)} of "
                              f"{fmt_bytes(est.unified_pool.capacity_bytes)} (GPU and host side share it)")
        elif auto and devices:
            reasons.insert(0, "does not fit even with every layer on the CPU")
        elif devices and fit_ngl < ngl and any(d.headroom_bytes < 0 for d in est.devices):
            reasons.insert(0, f"does not fit with these settings: -ngl {s.n_gpu_layers} puts {ngl} layers on the "
                              f"GPU(s), at most {fit_ngl} fit (-ngl {fit_ngl})")
        else:
            reasons.insert(0, "does not fit with these settings")
    elif experts is not None:
        verdict = Verdict.OFFLOAD
        reasons.insert(0, f"all {n_all} layers on the GPU(s) with the routed experts of {s.n_cpu_moe} of "
                          f"{model.n_layer} layers in system memory (--n-cpu-moe {s.n_cpu_moe}), as llama.cpp's "
                          f"fit places them, keeping {fmt_bytes(margin_bytes)} free; each token reads its "
                          "experts there at system-memory speed")
    elif devices and ngl >= n_all and (moved := sum(moved_bytes_by_layer(plan, est.placement).values())):
        verdict = Verdict.OFFLOAD
        reasons.insert(0, f"all {n_all} layers on the GPU(s); the weights the tensor overrides name "
                          f"({fmt_bytes(moved)}) stay in system memory and run at its speed")
    elif devices and ngl < n_all:
        verdict = Verdict.OFFLOAD
        reasons.insert(0, _layers_reason(ngl, n_all, None if auto else s.n_gpu_layers, fit_ngl,
                                         None if host_known else host_need))
    elif room is not None and room < margin_bytes:
        verdict = Verdict.TIGHT
        what = "llama.cpp's 1 GiB fit margin" if margin_bytes == SAFETY_MARGIN_BYTES else "the --margin"
        reasons.insert(0, f"fits with {fmt_bytes(room)} to spare, under {what}")
    else:
        verdict = Verdict.GO
        reasons.insert(0, "fits entirely" + (f" with {fmt_bytes(room)} to spare" if room is not None else ""))
    warning = _margin_warning(est, margin_bytes) if verdict in (Verdict.OFFLOAD, Verdict.GO) else None
    if warning:
        reasons.insert(1, warning)
    if explain:
        reasons.extend(_context_notes(model, s, est.n_ctx, ctx_fit))
    if not host_known:
        reasons.append(f"host RAM not checked: this plan needs {fmt_bytes(host_need)} of system memory "
                       "(give --hardware FILE with ram_gb)")
    suggestion = None
    # the suggestion searches other quants and contexts: a sixth of a report cell, which never shows it (`explain`)
    if explain and not verdict.runs_on_gpu and len(devices) <= MAX_GPUS_PER_CONTEXT:  # too many GPUs: a reason says
        suggestion = _suggest(plan, s, devices, search_host, n_all, ctx_fit, ctx_capped)
    unified = unified_device(devices) if explain else None
    lever = unified_lever(plan, s, unified, est) if unified is not None and ngl < n_all else None
    if lever:
        suggestion = f"{lever}; {suggestion}" if suggestion else lever
    if suggestion and suggestion not in reasons:
        reasons.append(suggestion)
    main = DEVICE_PREFIX.get(devices[0].backend) if devices else None
    draft_device = f"{main}0" if s.speculative is not None and len(devices) > 1 and main else None
    cmd = server_command(model, plan.ftype.name, s, ngl, est.n_ctx, gguf_name, draft_device)
    return Fit(verdict, tuple(reasons), est, ngl, ctx_fit, suggestion, cmd, unchecked,
                   "n_ctx_train" if ctx_capped else "memory", s.n_cpu_moe if experts else 0)


_OUTPUTS: dict[RunSettings, RunSettings] = {}


def with_parallel_outputs(s: RunSettings) -> RunSettings:
    """llama-server reserves logits for n_parallel outputs (n_outputs_max = n_parallel); the same object for the
    same settings, so the estimate's caches stay warm."""
    if s.n_outputs_max:
        return s
    if s not in _OUTPUTS:
        if len(_OUTPUTS) >= 65536:
            _OUTPUTS.clear()
        _OUTPUTS[s] = replace(s, n_outputs_max=s.n_parallel)
    return _OUTPUTS[s]
