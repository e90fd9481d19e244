"""Which device holds each layer and each weight, as llama.cpp's layer split decides.

Rules from llama.cpp src/llama-model.cpp (load_tensors) and src/llama-model-loader.cpp:
- llama.cpp counts n_layer + 1 offloadable layers (the extra one is the output layer) and
  offloads the last N: the output layer first, then repeating layers from the top down;
- with several GPUs the offloaded layers are split in proportion to each GPU's free memory
  (float32 split points, upper_bound on the layer's fraction);
- the input layer (token_embd, per_layer_token_embd) always stays on the CPU;
- a tied output matrix is a second tensor (TENSOR_DUPLICATED) placed with the output layer, so
  with the output layer on a GPU the embedding is resident twice;
- tensor overrides (-ot, --cpu-moe, --n-cpu-moe; gemma_fit.memory.overrides) then move single
  weights by name, whatever layer holds them.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from dataclasses import replace
from functools import cache

from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import TensorPlan, TensorSpec, per_plan
from gemma_fit.memory.overrides import TensorOverride, new_match_budget, override_device

CPU = -1  # device index of the host


@record
class Placement:
    n_gpu_layers: int
    layer_device: tuple[int, ...]  # per repeating layer: GPU index or CPU
    output_device: int
    n_devices: int
    overrides: tuple[TensorOverride, ...] = ()

    def layer_device_of(self, t: TensorSpec) -> int:
        """Where the layer split puts a weight (before overrides)."""
        if t.role == "input":
            return CPU
        if t.role == "output":
            return self.output_device
        return self.layer_device[t.layer if t.layer is not None else 0]

    def device_of(self, t: TensorSpec) -> int:
        if self.overrides:
            d = override_device(self.overrides, t.name)
            if d is not None:
                return d
        return self.layer_device_of(t)

    def devices_of(self, plan: TensorPlan) -> list[int]:
        """device_of for every tensor of the plan, in its order: the overrides' answers per tensor are worked out
        once per plan and rule set."""
        forced = _forced_devices(plan, self.overrides)
        return [f if f is not None else self.layer_device_of(t) for t, f in zip(plan.tensors, forced, strict=True)]


_FORCED: dict[tuple[int, int], tuple[TensorPlan, tuple[TensorOverride, ...], tuple[int | None, ...]]] = {}


def _forced_devices(plan: TensorPlan, overrides: tuple[TensorOverride, ...]) -> tuple[int | None, ...]:
    """Per tensor of the plan, the device the first matching override names (None: the layer split decides)."""
    if not overrides:
        return (None,) * len(plan.tensors)
    key = (id(plan), id(overrides))
    hit = _FORCED.get(key)
    if hit is not None and hit[0] is plan and hit[1] is overrides:
        return hit[2]
    if len(_FORCED) >= 4096:
        _FORCED.clear()
    new_match_budget()
    forced = tuple(override_device(overrides, t.name) for t in plan.tensors)
    _FORCED[key] = (plan, overrides, forced)
    return forced


def f32(x: float) -> float:
    """Round to float32, the precision llama.cpp computes split points in."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def split_points(free_bytes: list[int]) -> list[float]:
    """Cumulative, normalized split points in float32, as llama.cpp computes them."""
    if not any(free_bytes):  # every GPU full (other processes hold it): no proportion to keep, an even split
        free_bytes = [1] * len(free_bytes)
    sums, total = [], 0.0
    for b in free_bytes:
        total = f32(total + f32(float(b)))
        sums.append(total)
    return [f32(x / total) for x in sums]


def place_layers(n_layer: int, n_gpu_layers: int, free_bytes: list[int],
                 overrides: tuple[TensorOverride, ...] = ()) -> Placement:
    """Assign the repeating layers and the output layer to devices (llama-model.cpp), then the overrides."""
    placement = _place_layers(n_layer, n_gpu_layers, tuple(free_bytes))
    return replace(placement, overrides=overrides) if overrides else placement


@cache
def _place_layers(n_layer: int, n_gpu_layers: int, free_bytes: tuple[int, ...]) -> Placement:
    n_devices = len(free_bytes)
    if n_devices == 0:
        return Placement(0, tuple([CPU] * n_layer), CPU, 0)
    i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    splits = split_points(list(free_bytes))

    def device(il: int) -> int:
        if il < i_gpu_start or il - i_gpu_start >= act:
            return CPU
        frac = f32(f32(float(il - i_gpu_start)) / f32(float(act)))
        return min(bisect_right(splits, frac), n_devices - 1)

    layers = tuple(device(il) for il in range(n_layer))
    return Placement(min(n_gpu_layers, n_layer + 1), layers, device(n_layer), n_devices)


@record
class WeightsByDevice:
    device_bytes: tuple[int, ...]  # per GPU: model buffer bytes
    host_bytes: int  # weights left on the host (tensor bytes)
    host_mapped_span_bytes: int  # with mmap: first to last byte of the host tensors in the file


@record
class _Group:
    n_bytes: int
    start: int  # first byte in the file's data section
    end: int  # last byte + 1


@record
class PlanLayout:
    """A plan's weights grouped the way placement moves them: input, output, each layer."""

    input: _Group
    output: _Group
    layers: tuple[_Group, ...]
    output_duplicate_bytes: int  # the tied output matrix's own copy when the output is on a GPU


def _group(ranges: list[tuple[int, int, int]]) -> _Group:
    if not ranges:
        return _Group(0, 0, 0)
    return _Group(sum(r[0] for r in ranges), min(r[1] for r in ranges), max(r[2] for r in ranges))


@per_plan(4096)
def plan_layout(plan: TensorPlan) -> PlanLayout:
    """Cached per plan object (plans are built once per model and quant)."""
    from gemma_fit.gguf.layout import pad

    inputs, outputs = [], []
    layers: list[list[tuple[int, int, int]]] = [[] for _ in range(plan.model.n_layer)]
    pos = 0
    for t in plan.tensors:
        rng = (t.n_bytes, pos, pos + t.n_bytes)
        pos += pad(t.n_bytes)
        if t.role == "input":
            inputs.append(rng)
        elif t.role == "output":
            outputs.append(rng)
        else:
            layers[t.layer if t.layer is not None else 0].append(rng)
    names = plan.by_name()
    dup = 0 if "output.weight" in names else names["token_embd.weight"].n_bytes
    return PlanLayout(_group(inputs), _group(outputs), tuple(_group(x) for x in layers), dup)


@per_plan(4096)
def weights_by_device(plan: TensorPlan, placement: Placement) -> WeightsByDevice:
    """Cached per plan and placement: the searches ask one placement at every context."""
    return _weights_by_tensor(plan, placement) if placement.overrides else _weights_by_layer(plan, placement)


def _weights_by_layer(plan: TensorPlan, placement: Placement) -> WeightsByDevice:
    lay = plan_layout(plan)
    dev = [0] * placement.n_devices
    host = [lay.input]
    for il, group in enumerate(lay.layers):
        d = placement.layer_device[il]
        if d == CPU:
            host.append(group)
        else:
            dev[d] += group.n_bytes
    if placement.output_device == CPU:
        host.append(lay.output)
    else:
        dev[placement.output_device] += lay.output.n_bytes + lay.output_duplicate_bytes
    used = [g for g in host if g.n_bytes]
    span = max(g.end for g in used) - min(g.start for g in used) if used else 0
    return WeightsByDevice(tuple(dev), sum(g.n_bytes for g in host), span)


def _weights_by_tensor(plan: TensorPlan, placement: Placement) -> WeightsByDevice:
    """Weights per device tensor by tensor, when overrides move some of them (same rules as by layer:
    the tied output's copy goes where the output layer is; the mapped host span covers the host's)."""
    from gemma_fit.gguf.layout import pad

    dev = [0] * placement.n_devices
    host: list[tuple[int, int, int]] = []
    pos = 0
    for t, d in zip(plan.tensors, placement.devices_of(plan), strict=True):
        if d == CPU:
            host.append((t.n_bytes, pos, pos + t.n_bytes))
        else:
            dev[d] += t.n_bytes
        pos += pad(t.n_bytes)
    if placement.output_device != CPU:
        dev[placement.output_device] += plan_layout(plan).output_duplicate_bytes
    used = [g for g in host if g[0]]
    span = max(g[2] for g in used) - min(g[1] for g in used) if used else 0
    return WeightsByDevice(tuple(dev), sum(g[0] for g in host), span)


def moved_to_host(plan: TensorPlan, placement: Placement) -> tuple[TensorSpec, ...]:
    """The weights overrides keep on the host from layers the split puts on a GPU (routed experts with
    --cpu-moe). Per layer, what op offload copies to the GPU for one split; together, what the layers
    read from system memory."""
    if not placement.overrides:
        return ()
    return tuple(t for t, d in zip(plan.tensors, placement.devices_of(plan), strict=True)
                 if d == CPU and t.layer is not None and placement.layer_device_of(t) != CPU)


def moved_bytes_by_layer(plan: TensorPlan, placement: Placement) -> dict[int, int]:
    """Bytes per layer that overrides keep on the host from layers on a GPU; cached per plan and placement."""
    return _moved_bytes_by_layer(plan, placement) if placement.overrides else {}


@per_plan(16384)
def _moved_bytes_by_layer(plan: TensorPlan, placement: Placement) -> dict[int, int]:
    per_layer: dict[int, int] = {}
    for t in moved_to_host(plan, placement):
        assert t.layer is not None
        per_layer[t.layer] = per_layer.get(t.layer, 0) + t.n_bytes
    return per_layer
