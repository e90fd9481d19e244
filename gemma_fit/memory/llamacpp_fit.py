"""What llama.cpp's own fit (`--fit`, on by default in llama-server and llama-cli) would choose when the
user gives neither -c nor -ngl: the context, the GPU layers and the layers whose experts it moves.

The rules of common/fit.cpp (common_params_fit_impl), with gemma-fit's estimate in place of its dry-run
loads (`used` = model + context + compute on a device; `free` = capacity less the runtime overhead):
1. the trained context (x streams) with every layer on the GPUs; done if each GPU keeps its target
   (--fit-target, 1024 MiB) free;
2. else, where the devices together are short of their targets, the context shrinks: linear interpolation between
   the memory at the minimum (--fit-ctx 4096) and at the trained context towards sum(free) - sum(targets) (less
   (n+1) x a layer / 2, or / 6 for MoE, on n > 1 GPUs), rounded down to 256 x streams; one GPU stops there;
3. else, at the context step 2 left, layers move: dense models keep as many layers as keep the target free;
   MoE models first put every layer's experts in system memory, then bring whole layers back while the
   target holds (the experts left on the CPU are the highest-index layers').
Explicit -ngl, -ot, --cpu-moe or --n-cpu-moe switch step 3 off; an explicit -c switches step 2 off.
"""

from __future__ import annotations

from dataclasses import replace

from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.memory.estimate import MemoryEstimate, estimate_memory
from gemma_fit.memory.search import experts_to_cpu, largest_fitting
from gemma_fit.memory.settings import RunSettings
from gemma_fit.memory.unified import fit_view_extra_bytes

FIT_TARGET_BYTES = 1024 * 1024**2  # --fit-target default (common/common.h)
FIT_MIN_CTX = 4096  # --fit-ctx default


@record
class FitChoice:
    n_ctx: int
    n_gpu_layers: int
    n_cpu_moe: int  # layers whose routed experts it keeps in system memory
    summary: str  # what it did, in words


def _used(est: MemoryEstimate) -> int:
    return sum(d.total_bytes - d.overhead_bytes for d in est.devices)


def _keeps_targets(est: MemoryEstimate, target: int) -> bool:
    return all(d.headroom_bytes >= target for d in est.devices)


def _context_step(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], host: int | None,
                  n_all: int, target: int, at_max: MemoryEstimate) -> tuple[int, MemoryEstimate, bool]:
    """Step 2: the context llama.cpp's interpolation gives (it does not measure again), and whether it
    interpolated (one GPU then stops there)."""
    model = plan.model
    streams = s.n_streams
    n_max, n_min = model.n_ctx_train * streams, FIT_MIN_CTX * streams
    if n_max <= n_min:
        return n_max, at_max, False
    at_min = estimate_memory(plan, s.with_ctx(n_min), devices, n_all, host)
    goal = sum(d.capacity_bytes - d.overhead_bytes - target for d in at_max.devices)
    if len(devices) > 1:
        per_layer = sum(d.weights_bytes for d in at_max.devices) // n_all
        goal -= (len(devices) + 1) * per_layer // (6 if model.n_expert else 2)
    used_min, used_max = _used(at_min), _used(at_max)
    if goal <= used_min or used_max <= used_min:
        return n_min, at_min, False
    n_ctx = n_min + (n_max - n_min) * (goal - used_min) // (used_max - used_min)
    align = 256 * streams
    n_ctx = max(n_ctx - n_ctx % align, n_min)
    return n_ctx, estimate_memory(plan, s.with_ctx(n_ctx), devices, n_all, host), True


def _layer_step(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], host: int | None,
                n_all: int, target: int) -> tuple[int, int]:
    """Step 3: (GPU layers, layers with experts on the CPU)."""
    def dense_fits(n: int, settings: RunSettings = s) -> bool:
        return _keeps_targets(estimate_memory(plan, settings, devices, n, host), target)

    if plan.model.n_expert == 0:
        return largest_fitting(0, n_all, dense_fits), 0
    all_experts = replace(s, cpu_moe=True)
    if not dense_fits(n_all, all_experts):
        return largest_fitting(0, n_all, lambda n: dense_fits(n, all_experts)), plan.model.n_layer
    n_cpu = experts_to_cpu(plan, s, devices, host, target)
    return n_all, plan.model.n_layer if n_cpu is None else n_cpu


def llamacpp_fit(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], host_capacity: int | None,
                 target: int = FIT_TARGET_BYTES) -> FitChoice | None:
    """llama.cpp's choice for these settings with -c and -ngl left to it; None without a GPU (its fit then
    only shrinks the context against system memory, which the CPU answer already covers)."""
    if not devices:
        return None
    model = plan.model
    n_all = model.n_layer + 1
    s = replace(s, n_gpu_layers=None, override_tensor=(), cpu_moe=False, n_cpu_moe=0)
    target -= fit_view_extra_bytes(devices)  # Metal: the fit plans against the working set, not the pool
    n_max = model.n_ctx_train * s.n_streams
    at_max = estimate_memory(plan, s.with_ctx(n_max), devices, n_all, host_capacity)
    if _keeps_targets(at_max, target):  # step 1
        return FitChoice(n_max, n_all, 0, f"makes no changes: the trained context ({n_max:,}) with every layer "
                                          "on the GPU keeps its 1 GiB target free")
    if sum(d.headroom_bytes - target for d in at_max.devices) >= 0:
        # fit.cpp step 2 runs only when the devices together are short of their targets: here one device is, so
        # the context stays and layers move (step 3)
        n_ctx, est, interpolated = n_max, at_max, False
    else:
        n_ctx, est, interpolated = _context_step(plan, s, devices, host_capacity, n_all, target, at_max)
    if (len(devices) == 1 and interpolated) or _keeps_targets(est, target):
        return FitChoice(n_ctx, n_all, 0, f"reduces the context to {n_ctx:,} tokens (every layer on the GPU; "
                                          f"{_left(est)})")
    at = s.with_ctx(n_ctx)
    ngl, n_cpu = _layer_step(plan, at, devices, host_capacity, n_all, target)
    moved = f", the routed experts of {n_cpu} layers in system memory" if n_cpu else ""
    placed = estimate_memory(plan, replace(at, n_cpu_moe=n_cpu), devices, ngl, host_capacity)
    return FitChoice(n_ctx, ngl, n_cpu, f"reduces the context to {n_ctx:,} tokens and keeps {ngl} of {n_all} "
                                        f"layers on the GPU(s){moved} ({_left(placed)})")


def _left(est: MemoryEstimate) -> str:
    """What this estimate says the choice leaves free (llama.cpp interpolates and does not measure again)."""
    from gemma_fit.base.units import fmt_bytes

    room = min(d.headroom_bytes for d in est.devices)
    return f"by this estimate {fmt_bytes(room)} free" if room >= 0 else f"by this estimate {fmt_bytes(-room)} short"
