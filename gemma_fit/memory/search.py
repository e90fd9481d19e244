"""The searches over the estimate: how many layers fit (-ngl auto), the largest context that fits,
and the best quant that fits; and the bisection they (and the vLLM and transformers engines) share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.gguf.types import CONTRACT_QUANTS
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.memory.estimate import context_terms, estimate_memory, gpus_fit
from gemma_fit.memory.estimate import fits as fits_on
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.spec import ModelSpec

T = TypeVar("T")


def memo(search: Callable[..., T]) -> Callable[..., T]:
    """A search's answer cached by what it reads of its inputs: the plan (by identity), the settings, and of each
    device only its backend and memory (a report asks the same search on many GPUs of one size)."""
    answers: dict[tuple[object, ...], tuple[object, T]] = {}

    def cached(first: Any, s: RunSettings, devices: tuple[GPUSpec, ...], *rest: Any) -> T:
        key = (id(first), s, tuple(_memory_of(d) for d in devices), rest)
        hit = answers.get(key)
        if hit is not None and hit[0] is first:
            return hit[1]
        value = search(first, s, devices, *rest)
        if len(answers) >= _MEMO_MAX:
            answers.clear()
        answers[key] = (first, value)
        return value

    return cached


_MEMO_MAX = 65536


def _memory_of(d: GPUSpec) -> tuple[object, ...]:
    return d.backend, d.usable_memory_bytes, d.memory_bytes, d.unified_memory, d.unified_platform


def largest_fitting(lo: int, hi: int, fits: Callable[[int], bool], *, try_hi_first: bool = False) -> int:
    """The largest n in [lo, hi] with fits(n), by bisection.

    Precondition: `fits` is monotone on [lo, hi]: true up to some n, false above it. `lo` is taken
    to fit and is never evaluated, so the answer is `lo` both when nothing above it fits and when
    not even `lo` does (a caller that must tell those apart checks `lo` first); it is `lo` as well
    when lo >= hi. Only values in (lo, hi] are passed to `fits`. With `try_hi_first`, `fits(hi)` is
    asked first and a true answer ends the search (one evaluation when everything fits); otherwise
    the bisection starts straight away.
    """
    if try_hi_first and lo < hi and fits(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@memo
def auto_gpu_layers(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...],
                    host_capacity: int | None, margin_bytes: int = 0) -> int:
    """-ngl auto: every layer when they all fit (the verdict warns when that leaves less than the margin),
    else the most layers (output layer first) that leave `margin_bytes` free on every GPU, as llama.cpp's
    fit keeps its target free when it moves layers."""
    if not devices:
        return 0
    n_all = plan.model.n_layer + 1

    def fits(n: int, margin: int = margin_bytes) -> bool:
        return gpus_fit(plan, s, devices, n, margin)  # the GPUs only: the host is the verdict's

    if fits(n_all, 0):
        return n_all
    # device memory grows with every layer offloaded; 0 layers (everything on the CPU) is the floor
    return largest_fitting(0, n_all - 1, fits)


@memo
def experts_to_cpu(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], host_capacity: int | None,
                   margin_bytes: int) -> int | None:
    """For a mixture-of-experts model that does not fit on the GPU(s): the fewest layers whose routed
    experts go to system memory (--n-cpu-moe N) with every layer on the GPU and `margin_bytes` free on
    each, as llama.cpp's fit converts layers (its experts-on-CPU layers are the last ones, --n-cpu-moe's
    the first: the same bytes where the layers are alike). None when not even all experts on the CPU fit."""
    model = plan.model
    if not devices or model.n_expert == 0:
        return None
    terms = context_terms(model, s)
    n_all = model.n_layer + 1

    def fits_with(n_cpu: int) -> bool:
        est = estimate_memory(plan, replace(s, n_cpu_moe=n_cpu), devices, n_all, host_capacity, terms)
        return est.fits() and all(d.headroom_bytes >= margin_bytes for d in est.devices)

    if not fits_with(model.n_layer):
        return None
    # device memory falls with every layer's experts moved: bisect on the layers kept whole on the GPU
    kept = largest_fitting(0, model.n_layer, lambda k: fits_with(model.n_layer - k))
    return model.n_layer - kept


def max_ctx_fit(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], n_gpu_layers: int,
                host_capacity: int | None) -> int:
    """Largest context (a multiple of 256, at most the trained context) that fits with these
    layers offloaded; 0 when not even 256 tokens fit. The search sets the context itself, so the answer is
    cached whatever context `s` asks (a report asks six on every GPU)."""
    return _max_ctx_fit(plan, s.with_ctx(0), devices, n_gpu_layers, host_capacity)


@memo
def _max_ctx_fit(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], n_gpu_layers: int,
                 host_capacity: int | None) -> int:
    model = plan.model
    step = 256 * (1 if s.kv_unified else s.n_parallel)

    def fits(n_steps: int) -> bool:
        return fits_on(plan, s.with_ctx(n_steps * step), devices, n_gpu_layers, host_capacity)

    most = model.n_ctx_train // step
    if most == 0 or not fits(1):
        return 0
    # memory grows with the context: bisect on multiples of `step` (from 0: one step is known to fit)
    return largest_fitting(0, most, fits, try_hi_first=True) * step


@memo
def quant_that_fits(model: ModelSpec, s: RunSettings, devices: tuple[GPUSpec, ...],
                    host_capacity: int | None) -> str | None:
    """The largest (best quality) file type whose model fits entirely at these settings."""
    plans = sorted((build_plan(model, q) for q in CONTRACT_QUANTS), key=lambda p: -p.tensor_data_bytes)
    n_all = model.n_layer + 1 if devices else 0
    for plan in plans:
        if fits_on(plan, s, devices, n_all, host_capacity):  # the estimate's answer, without building it
            return plan.ftype.name
    return None
