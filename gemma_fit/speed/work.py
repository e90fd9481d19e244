"""The work one token costs, from the tensor plan: weight bytes read, matrix FLOPs (dense and
expert apart, since experts are multiplied in small per-expert batches), attention over the prompt,
KV cache read, and llama.cpp graph nodes, grouped by the device that holds each layer.
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import TensorPlan, TensorSpec
from gemma_fit.gguf.unsloth import published_excess
from gemma_fit.memory.estimate import MemoryEstimate
from gemma_fit.memory.placement import CPU, Placement, moved_to_host
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.graph import graph_nodes


@record
class LayerWork:
    """One layer's (or the output's) per-token work."""

    read_bytes: float = 0.0  # weights read to generate one token (routed experts only)
    dense_flops: float = 0.0  # 2 x elements of the dense weight matrices
    expert_flops: float = 0.0  # 2 x elements of the routed experts' matrices
    dense_bytes: float = 0.0  # bytes of the dense matrices (read once per ubatch in prefill)
    expert_bytes: float = 0.0  # bytes of all experts (an ubatch routes tokens to most of them)
    read_weights: float = 0.0  # weight elements one token's matrix-vector products multiply (routed experts only)

    def __add__(self, other: LayerWork) -> LayerWork:
        return LayerWork(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[float, ...]:
        return (self.read_bytes, self.dense_flops, self.expert_flops, self.dense_bytes, self.expert_bytes,
                self.read_weights)


def _tensor_work(t: TensorSpec, plan: TensorPlan) -> LayerWork:
    model = plan.model
    if t.role == "input":
        return LayerWork()  # token_embd / per_layer_token_embd: get_rows reads one row
    is_expert = "_exps" in t.name and model.n_expert > 0
    routed = model.n_expert_used / model.n_expert if is_expert else 1.0
    read = t.n_bytes * routed
    matrix = len(t.shape) >= 2 and t.name != "output.weight"  # prefill computes the last token's logits only
    flops = 2.0 * t.n_elements * routed if matrix else 0.0
    multiplied = t.n_elements * routed if len(t.shape) >= 2 else 0.0  # decode multiplies the output matrix too
    if is_expert:
        return LayerWork(read, 0.0, flops, 0.0, float(t.n_bytes) if matrix else 0.0, multiplied)
    return LayerWork(read, flops, 0.0, float(t.n_bytes) if matrix else 0.0, 0.0, multiplied)


def _scaled(w: LayerWork, scale: float) -> LayerWork:
    """The same work with its weight bytes `scale` times as heavy (the FLOPs unchanged)."""
    return LayerWork(w.read_bytes * scale, w.dense_flops, w.expert_flops, w.dense_bytes * scale, w.expert_bytes * scale,
                     w.read_weights)


@record
class ExpertMatrix:
    """One routed-expert weight matrix (one MUL_MAT_ID node): what a backend's kernel choice for it turns on."""

    rows: int  # each expert's output rows (ggml ne[1])
    weight_type: str  # its ggml type, e.g. "BF16"
    quantized: bool


@record
class TokenWork:
    layers: tuple[LayerWork, ...]
    output: LayerWork
    expert_matrices: tuple[tuple[ExpertMatrix, ...], ...] = ()  # per layer: its routed-expert weight matrices


_CACHE: dict[int, tuple[TensorPlan, TokenWork]] = {}


def token_work(plan: TensorPlan) -> TokenWork:
    hit = _CACHE.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    layers = [LayerWork() for _ in range(plan.model.n_layer)]
    experts: list[tuple[ExpertMatrix, ...]] = [()] * plan.model.n_layer
    output = LayerWork()
    for t in plan.tensors:
        w = _tensor_work(t, plan)
        if t.role == "output":
            output = output + w
        elif t.role != "input":
            il = t.layer if t.layer is not None else 0
            layers[il] = layers[il] + w
            if w.expert_bytes > 0:
                experts[il] += (ExpertMatrix(t.shape[1], t.type.name, t.type.is_quantized),)
    if "output.weight" not in plan.by_name():  # the tied output matrix is read every token
        embd = plan.by_name()["token_embd.weight"]
        output = output + LayerWork(read_bytes=float(embd.n_bytes), read_weights=float(embd.n_elements))
    scale = 1.0 + published_excess(plan)  # an Unsloth dynamic file's unpublished upgrades weigh that much more
    if scale != 1.0:
        layers = [_scaled(w, scale) for w in layers]
        output = _scaled(output, scale)
    work = TokenWork(tuple(layers), output, tuple(experts))
    _CACHE[id(plan)] = (plan, work)
    return work


@cache
def attended_cells(n_tokens: int, n_ubatch: int, window: int, depth: int = 0) -> float:
    """Sum over a prompt's ubatches of (tokens in the ubatch x KV cells its attention reads), the prompt starting
    after `depth` tokens already in the cache (llama-bench -d).

    llama.cpp computes each ubatch's scores against every cell up to the ubatch's end (the causal
    mask zeroes the rest, it does not skip them); a sliding-window layer reads at most its window
    plus the ubatch. window = 0: full attention."""
    total, start = 0.0, depth
    n_tokens += depth
    while start < n_tokens:
        u = min(n_ubatch, n_tokens - start)
        end = start + u
        n_kv = min(end, window + n_ubatch) if window else end
        total += u * n_kv
        start = end
    return total


def attention_flops(model: ModelSpec, n_tokens: int, n_ubatch: int, depth: int = 0) -> dict[int, float]:
    """FLOPs of attention itself (scores Q.K and the weighted sum with V) over a prompt, per layer:
    2 x n_head x head_dim for each of the two products, per (token, attended cell) pair."""
    out = {}
    for layer in model.layers:
        window = model.n_swa if layer.is_swa and model.has_swa else 0
        out[layer.index] = 4.0 * layer.n_head * layer.head_dim * attended_cells(n_tokens, n_ubatch, window, depth)
    return out


def kv_read_per_token(model: ModelSpec, est: MemoryEstimate, position: int) -> dict[int, float]:
    """KV bytes attended for one token at `position`, per layer (SWA layers stop at their cache)."""
    out = {}
    for layer in model.layers:
        if layer.index not in est.kv.layer_bytes:
            continue
        swa = layer.is_swa and model.has_swa
        cells = est.kv.swa_cells if swa else est.kv.base_cells
        per_cell = est.kv.layer_bytes[layer.index] / (cells * est.kv.n_streams)
        attended = min(position, cells)
        if swa and est.settings.n_parallel > 1:  # a unified cache holds every slot's window; each reads its own
            attended = min(attended, model.n_swa + est.settings.ubatch)
        out[layer.index] = per_cell * attended
    return out


_WORK_MAX = 8192  # a report asks the same plan and placement on every GPU of a backend
_ATTENDED: dict[tuple[int, ...], tuple[object, tuple[tuple[int, float], ...]]] = {}


def attended_kv(model: ModelSpec, est: MemoryEstimate, position: int) -> tuple[tuple[int, float], ...]:
    """kv_read_per_token as a cache key, itself cached by what it reads (the KV layout, found by identity as the
    estimate's caches hand out one per model and settings): a report asks it for every cell."""
    key = (id(est.kv), id(model), position, est.settings.n_parallel, est.settings.ubatch)
    hit = _ATTENDED.get(key)
    if hit is not None and hit[0] is est.kv:
        return hit[1]
    value = tuple(kv_read_per_token(model, est, position).items())
    if len(_ATTENDED) >= _WORK_MAX:
        _ATTENDED.clear()
    _ATTENDED[key] = (est.kv, value)
    return value


@record
class DeviceWork:
    """Per device (GPU index, or CPU): per-token work, prompt attention FLOPs, layers and graph nodes."""

    work: dict[int, LayerWork]
    kv_read: dict[int, float]  # KV bytes read per generated token
    attn_flops: dict[int, float]  # attention FLOPs over the whole prompt
    layers: dict[int, int]
    nodes: dict[int, float]  # GPU kernels (fused llama.cpp graph nodes) per token
    matmul_nodes: dict[int, float]
    ffn_elements: dict[int, float]  # feed-forward activations per token (the GLU's output width)
    cpu_expert_layers: int = 0  # layers on a GPU whose routed experts overrides keep in system memory
    # routed-expert weight matrices of the layers each device holds
    expert_matrices: dict[int, tuple[ExpertMatrix, ...]] | None = None

    def read(self, d: int) -> float:
        return self.work[d].read_bytes + self.kv_read[d]


_WORK: dict[tuple[object, ...], tuple[TensorPlan, DeviceWork]] = {}


def device_work(plan: TensorPlan, est: MemoryEstimate, n_gpus: int, prompt_tokens: int, depth: int = 0) -> DeviceWork:
    """Per-token work per device, cached: it depends on the plan, the placement and the settings, never on the
    GPUs' own figures (those are the speed model's, applied after). `depth`: tokens already in the cache before the
    prompt (a conversation's earlier turns, llama-bench -d). The context enters only through the KV bytes attended
    at the prompt's end (a report asks every context of a plan on every GPU: where the placement holds, one answer)."""
    attended = attended_kv(plan.model, est, max(1, depth + prompt_tokens))
    key = (id(plan), est.settings.with_ctx(0), est.placement, n_gpus, prompt_tokens, depth, attended)
    hit = _WORK.get(key)
    if hit is not None and hit[0] is plan:
        return hit[1]
    work = _device_work(plan, est, n_gpus, prompt_tokens, depth)
    if len(_WORK) >= _WORK_MAX:
        _WORK.clear()
    _WORK[key] = (plan, work)
    return work


def _device_work(plan: TensorPlan, est: MemoryEstimate, n_gpus: int, prompt_tokens: int, depth: int) -> DeviceWork:
    model, placement = plan.model, est.placement
    devices = [*range(n_gpus), CPU]
    sums = {d: [0.0] * len(LayerWork().astuple()) for d in devices}  # LayerWork fields, summed per layer
    kv = dict.fromkeys(devices, 0.0)
    attn = dict.fromkeys(devices, 0.0)
    layers = dict.fromkeys(devices, 0)
    ffn = dict.fromkeys(devices, 0.0)
    expert_matrices: dict[int, tuple[ExpertMatrix, ...]] = dict.fromkeys(devices, ())
    tw = token_work(plan)
    for il, lw in enumerate(tw.layers):
        d = placement.layer_device[il]
        layers[d] += 1
        expert_matrices[d] += tw.expert_matrices[il]
        spec = model.layers[il]
        ffn[d] += spec.n_ff + (model.n_ff_exp * model.n_expert_used if spec.has_experts else 0)
        if placement.overrides:
            continue  # summed tensor by tensor below
        acc = sums[d]
        for k, v in enumerate(lw.astuple()):
            acc[k] += v
    if placement.overrides:
        work = _work_by_tensor(plan, est, devices)
    else:
        work = {d: LayerWork(*v) for d, v in sums.items()}
        work[placement.output_device] = work[placement.output_device] + tw.output
    for il, nbytes in kv_read_per_token(model, est, max(1, depth + prompt_tokens)).items():
        kv[placement.layer_device[il] if est.settings.kv_offload else CPU] += nbytes
    for il, f in attention_flops(model, prompt_tokens, est.settings.ubatch, depth).items():
        attn[placement.layer_device[il]] += f
    g = graph_nodes(model)
    nodes = {d: n * g.kernels / model.n_layer for d, n in layers.items()}
    matmuls = {d: n * g.matmul_nodes / model.n_layer for d, n in layers.items()}
    split_layers = len({t.layer for t in moved_to_host(plan, placement) if "_exps" in t.name})
    return DeviceWork(work, kv, attn, layers, nodes, matmuls, ffn, split_layers, expert_matrices)


_BY_TENSOR: dict[tuple[int, Placement, tuple[int, ...]], tuple[TensorPlan, dict[int, LayerWork]]] = {}


def _work_by_tensor(plan: TensorPlan, est: MemoryEstimate, devices: list[int]) -> dict[int, LayerWork]:
    """Per-token work where each weight is, when tensor overrides move some of them (routed experts on
    the CPU: each token reads only the experts it is routed to there). Cached per plan and placement: it does
    not depend on the context, which a report varies."""
    key = (id(plan), est.placement, tuple(devices))
    hit = _BY_TENSOR.get(key)
    if hit is not None and hit[0] is plan:
        return dict(hit[1])
    placement = est.placement
    sums = {d: [0.0] * len(LayerWork().astuple()) for d in devices}  # LayerWork fields, summed per tensor
    for t, d in zip(plan.tensors, placement.devices_of(plan), strict=True):
        if t.role == "input":
            continue
        acc = sums[d]
        for k, v in enumerate(_tensor_work(t, plan).astuple()):
            acc[k] += v
    if "output.weight" not in plan.by_name():  # the tied output matrix is read every token
        embd = plan.by_name()["token_embd.weight"]
        sums[placement.output_device][0] += float(embd.n_bytes)
        sums[placement.output_device][5] += float(embd.n_elements)
    work = {d: LayerWork(*v) for d, v in sums.items()}
    if len(_BY_TENSOR) >= 4096:
        _BY_TENSOR.clear()
    _BY_TENSOR[key] = (plan, work)
    return dict(work)
