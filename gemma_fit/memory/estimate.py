"""Memory per device and on the host for one model, quant, settings and set of devices.

Pure functions over immutable inputs: a TensorPlan, RunSettings and Devices in, a MemoryEstimate
out. Each term is what llama.cpp itself allocates (model buffers, KV buffers, compute buffers) plus
the measured per-device runtime overhead (CUDA context, cuBLAS, memory pool). The searches over
the estimate (layers, context, quant that fit) are in gemma_fit.memory.search.
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.memory.compute_buffer import ComputePhases, compute_phases
from gemma_fit.memory.kv_cache import KVCacheLayout, kv_cache_layout
from gemma_fit.memory.overrides import tensor_overrides
from gemma_fit.memory.placement import (
    CPU,
    Placement,
    moved_bytes_by_layer,
    place_layers,
    plan_layout,
    weights_by_device,
)
from gemma_fit.memory.settings import RunSettings
from gemma_fit.memory.unified import (
    UnifiedPool,
    gpu_ceiling,
    mapped_once_bytes,
    platform,
    pool_capacity,
    unified_device,
)
from gemma_fit.model.spec import ModelSpec

MIB = 1024**2
F32 = 4


@record
class DeviceMemory:
    id: str
    name: str
    weights_bytes: int
    kv_cache_bytes: int
    compute_bytes: int
    overhead_bytes: int
    capacity_bytes: int
    mmproj_bytes: int = 0  # the multimodal projector's own model buffer (clip), main GPU only
    draft_bytes: int = 0  # a speculative drafter's weights, KV cache and compute buffer, main GPU only

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_cache_bytes + self.compute_bytes + self.overhead_bytes + self.mmproj_bytes
                + self.draft_bytes)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.total_bytes


@record
class HostMemory:
    weights_bytes: int  # mapped (mmap) span of the weights left on the host
    kv_cache_bytes: int
    compute_bytes: int
    output_bytes: int  # the logits/embeddings output buffer (pinned when a GPU is used)
    capacity_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.compute_bytes + self.output_bytes

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.capacity_bytes is None else self.capacity_bytes - self.total_bytes


@record
class MemoryEstimate:
    settings: RunSettings
    n_ctx: int  # as llama.cpp resolves it
    placement: Placement
    kv: KVCacheLayout
    phases: ComputePhases
    devices: tuple[DeviceMemory, ...]
    host: HostMemory
    unified_pool: UnifiedPool | None = None  # one memory for GPU and host side (the host has no capacity then)

    def fits(self) -> bool:
        if any(d.headroom_bytes < 0 for d in self.devices):
            return False
        if self.unified_pool is not None:
            return self.unified_pool.headroom_bytes >= 0
        return self.host.headroom_bytes is None or self.host.headroom_bytes >= 0


@record
class Overhead:
    bytes: int
    measured: bool


@cache
def runtime_overhead(backend: str) -> Overhead:
    data = read_packaged_yaml("llamacpp/runtime_overhead.yaml")["backends"]
    entry = data.get(backend) or data["cuda"]
    return Overhead(int(entry["overhead_mib"] * MIB), bool(entry["measured"]))


def _kv_by_device(model: ModelSpec, kv: KVCacheLayout, placement: Placement, s: RunSettings,
                  n_devices: int) -> tuple[list[int], int]:
    dev = [0] * n_devices
    host = 0
    for il, nbytes in kv.layer_bytes.items():
        d = placement.layer_device[il] if s.kv_offload else CPU
        if d == CPU:
            host += nbytes
        else:
            dev[d] += nbytes
    return dev, host


def _host_inputs(model: ModelSpec, phases: ComputePhases, n_tokens: int) -> int:
    """Graph inputs built on the host: token embeddings (get_rows on the CPU-resident table),
    token ids, positions, KQ masks, per-layer-embedding rows."""
    return model.n_embd * n_tokens * F32 + 2 * n_tokens * 4 + phases.masks + phases.per_layer_inputs


def _largest_host_layer_weights(plan: TensorPlan, placement: Placement) -> int:
    """With layers left on the CPU, llama.cpp still runs their big-batch matmuls on the GPU
    (op_offload) and copies the weights into the GPU compute buffer, one layer split at a time."""
    layers = plan_layout(plan).layers
    return max((g.n_bytes for il, g in enumerate(layers) if placement.layer_device[il] == CPU), default=0)


def _compute_split(model: ModelSpec, plan: TensorPlan, placement: Placement, phases: ComputePhases,
                   n_tokens: int, backends: list[str]) -> tuple[list[int], int]:
    """Compute buffer per GPU and on the host."""
    n_devices = len(backends)
    if n_devices == 0:
        return [], phases.total
    dev = [0] * n_devices
    for d in set(placement.layer_device) - {CPU}:
        dev[d] = phases.device_layers(backends[d])
    if placement.output_device != CPU:
        dev[placement.output_device] = max(dev[placement.output_device], phases.output)
    host = _host_inputs(model, phases, n_tokens)
    cpu_layers = CPU in placement.layer_device
    moved = max(moved_bytes_by_layer(plan, placement).values(), default=0)
    if cpu_layers or moved:  # the CPU computes its weights' ops in decode; the GPU copies them for big batches
        host += max(phases.ffn, phases.attention)
        dev[0] += max(_largest_host_layer_weights(plan, placement), moved)
    if placement.output_device == CPU:
        host = max(host, phases.output)
    return dev, host


def cpu_only_weights_bytes(plan: TensorPlan) -> int:
    """Weights of a CPU-only run. Gemma 3n and 4 create the tied output tensor before the token
    embedding (src/models/gemma3n.cpp, gemma4.cpp), so the output layer gets its own copy (in the
    CPU_REPACK buffer for repackable types); Gemma 1-3 share one tensor."""
    names = plan.by_name()
    own_output = plan.model.arch in ("gemma3n", "gemma4") and "output.weight" not in names
    return plan.tensor_data_bytes + (names["token_embd.weight"].n_bytes if own_output else 0)


@record
class ContextTerms:
    """What depends on the settings but not on the placement: computed once per settings."""

    kv: KVCacheLayout
    phases: ComputePhases


@cache
def context_terms(model: ModelSpec, s: RunSettings) -> ContextTerms:
    """Cached: a report asks the same model and settings on every GPU."""
    kv = kv_cache_layout(model, s)
    return ContextTerms(kv, compute_phases(model, s, kv))


@record
class _Core:
    """What an estimate is on any devices of these backends, before their capacities: the placement, the KV
    cache and compute buffer, the bytes per device (weights, KV, compute, overhead, projector) and on the host."""

    plan: TensorPlan  # kept so that the cache's id(plan) key cannot outlive its plan
    placement: Placement
    terms: ContextTerms
    per_device: tuple[tuple[int, int, int, int, int, int], ...]
    host: tuple[int, int, int, int]  # weights (mapped span), KV, compute, output


_CORES: dict[tuple[object, ...], _Core] = {}
_CORES_MAX = 8192  # a report asks the same plan at the same settings on every GPU of a backend


def _core(plan: TensorPlan, s: RunSettings, backends: tuple[str, ...], n_gpu_layers: int,
          split: tuple[int, ...], terms: ContextTerms | None) -> _Core:
    """The capacity-free part of an estimate, cached: with one device, the placement does not depend on its
    capacity (with several, the split proportions do, and are part of the key)."""
    key = (id(plan), s, backends, n_gpu_layers, split)
    hit = _CORES.get(key)
    if hit is not None and hit.plan is plan:
        return hit
    model = plan.model
    overrides = (tensor_overrides(s.override_tensor, s.cpu_moe, s.n_cpu_moe, len(backends), model.n_layer)
                 if s.has_overrides else ())
    placement = place_layers(model.n_layer, n_gpu_layers, list(split) or [1] * len(backends),
                             overrides if backends else ())
    terms = terms or context_terms(model, s)
    weights = weights_by_device(plan, placement)
    kv_dev, kv_host = _kv_by_device(model, terms.kv, placement, s, len(backends))
    n_tokens = min(s.resolved_ctx(model), s.ubatch)
    comp_dev, comp_host = _compute_split(model, plan, placement, terms.phases, n_tokens, list(backends))
    per_device = tuple((weights.device_bytes[i], kv_dev[i], comp_dev[i], runtime_overhead(b).bytes,
                        s.mmproj_bytes if i == 0 else 0, s.draft_bytes if i == 0 else 0)
                       for i, b in enumerate(backends))
    host_weights = (weights.host_mapped_span_bytes if backends
                    else cpu_only_weights_bytes(plan) + s.mmproj_bytes + s.draft_bytes)
    core = _Core(plan, placement, terms, per_device,
                 (host_weights, kv_host, comp_host, model.n_vocab * max(1, s.n_parallel) * F32))
    if len(_CORES) >= _CORES_MAX:
        _CORES.clear()
    _CORES[key] = core
    return core


def _shared(plan: TensorPlan, s: RunSettings, unified: GPUSpec, core: _Core) -> int:
    """Weight bytes a unified device's two sides count twice though they are one set of mapped pages."""
    p = platform(unified)
    assert p is not None
    return mapped_once_bytes(p, core.per_device[0][0], core.host[0], plan.tensor_data_bytes, s.has_overrides)


def _capacity_free(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], n_gpu_layers: int,
                   ) -> tuple[_Core, list[int]]:
    """The cached core and each GPU's capacity (a unified device's: its GPU side's ceiling), as estimate_memory
    pairs them."""
    unified = unified_device(devices)
    caps = [gpu_ceiling(unified)] if unified else [d.usable_memory_bytes for d in devices]
    core = _core(plan, s, tuple(d.backend for d in devices), n_gpu_layers, tuple(caps) if len(caps) > 1 else (),
                 None)
    return core, caps


def gpus_fit(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], n_gpu_layers: int,
             margin_bytes: int = 0) -> bool:
    """Every GPU keeps `margin_bytes` free (the host side not checked): what the -ngl search asks, without
    building the estimate."""
    core, caps = _capacity_free(plan, s, devices, n_gpu_layers)
    return all(sum(used) + margin_bytes <= cap for used, cap in zip(core.per_device, caps, strict=True))


def fits(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], n_gpu_layers: int,
         host_capacity: int | None, margin_bytes: int = 0) -> bool:
    """estimate_memory(...).fits() with `margin_bytes` free on every GPU, without building the estimate: the
    searches ask this thousands of times in a report."""
    core, caps = _capacity_free(plan, s, devices, n_gpu_layers)
    gpu = [sum(used) for used in core.per_device]
    if any(g + max(0, margin_bytes) > cap for g, cap in zip(gpu, caps, strict=True)):
        return False
    unified = unified_device(devices)
    if unified is not None:  # one memory: GPU and host sides together within what the process may have
        pool = pool_capacity(unified) if host_capacity is None else min(pool_capacity(unified), host_capacity)
        return gpu[0] + sum(core.host) - _shared(plan, s, unified, core) <= pool
    return host_capacity is None or sum(core.host) <= host_capacity


def estimate_memory(plan: TensorPlan, s: RunSettings, devices: tuple[GPUSpec, ...], n_gpu_layers: int,
                    host_capacity: int | None, terms: ContextTerms | None = None) -> MemoryEstimate:
    model = plan.model
    unified = unified_device(devices)
    capacities = [gpu_ceiling(unified)] if unified else [d.usable_memory_bytes for d in devices]
    core = _core(plan, s, tuple(d.backend for d in devices), n_gpu_layers,
                 tuple(capacities) if len(devices) > 1 else (), terms)
    per_device = tuple(DeviceMemory(d.id, d.name, w, kv, comp, over, capacities[i], mmproj, draft)
                       for i, (d, (w, kv, comp, over, mmproj, draft)) in enumerate(zip(devices, core.per_device,
                                                                                       strict=True)))
    kv, phases = core.terms.kv, core.terms.phases
    if unified is None:
        host = HostMemory(*core.host, host_capacity)
        return MemoryEstimate(s, s.resolved_ctx(model), core.placement, kv, phases, per_device, host)
    # one memory: the host side has no capacity of its own; the pool holds both sides
    host = HostMemory(*core.host, None)
    pool_platform = platform(unified)
    assert pool_platform is not None
    capacity = pool_capacity(unified) if host_capacity is None else min(pool_capacity(unified), host_capacity)
    pool = UnifiedPool(pool_platform, capacity, min(capacities[0], capacity), per_device[0].total_bytes,
                       host.total_bytes, _shared(plan, s, unified, core))
    return MemoryEstimate(s, s.resolved_ctx(model), core.placement, kv, phases, per_device, host, pool)
