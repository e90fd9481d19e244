"""Which device holds each layer and each weight, as llama.cpp's layer split decides.

Rules from llama.cpp src/llama-model.cpp (load_tensors) and src/llama-model-loader.cpp:
- llama.cpp counts n_layer + 1 offloadable layers (the extra one is the output layer) and
  offloads the last N: the output layer first, then repeating layers from the top down;
- with several GPUs the offloaded layers are split in proportion to each GPU's free memory
  (float32 split points, upper_bound on the layer's fraction);
- the input layer (token_embd, per_layer_token_embd) always stays on the CPU;
- a tied output matrix is a second tensor (TENSOR_DUPLICATED) placed with the output layer, so
  with the output layer on a GPU the embedding is resident twice.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from .tensor_plan import TensorPlan, TensorSpec

CPU = -1  # device index of the host


@dataclass(frozen=True)
class Placement:
    n_gpu_layers: int
    layer_device: tuple[int, ...]  # per repeating layer: GPU index or CPU
    output_device: int
    n_devices: int

    def device_of(self, t: TensorSpec) -> int:
        if t.role == "input":
            return CPU
        if t.role == "output":
            return self.output_device
        return self.layer_device[t.layer if t.layer is not None else 0]


def split_points(free_bytes: list[int]) -> list[float]:
    """Cumulative, normalized split points in float32, as llama.cpp computes them."""
    sums = np.cumsum(np.array(free_bytes, dtype=np.float32), dtype=np.float32)
    return [float(x) for x in (sums / sums[-1]).astype(np.float32)]


def place_layers(n_layer: int, n_gpu_layers: int, free_bytes: list[int]) -> Placement:
    """Assign the repeating layers and the output layer to devices (llama-model.cpp)."""
    n_devices = len(free_bytes)
    if n_devices == 0:
        return Placement(0, tuple([CPU] * n_layer), CPU, 0)
    i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    splits = split_points(free_bytes)

    def device(il: int) -> int:
        if il < i_gpu_start or il - i_gpu_start >= act:
            return CPU
        frac = float(np.float32(il - i_gpu_start) / np.float32(act))
        return min(bisect_right(splits, frac), n_devices - 1)

    layers = tuple(device(il) for il in range(n_layer))
    return Placement(min(n_gpu_layers, n_layer + 1), layers, device(n_layer), n_devices)


@dataclass(frozen=True)
class WeightsByDevice:
    device_bytes: tuple[int, ...]  # per GPU: model buffer bytes
    host_bytes: int  # weights left on the host (tensor bytes; mapped span for mmap below)
    host_mapped_span_bytes: int  # with mmap: first to last byte of the host tensors in the file


def _file_offsets(plan: TensorPlan) -> list[tuple[int, int]]:
    from .gguf_layout import pad

    out, pos = [], 0
    for t in plan.tensors:
        out.append((pos, pos + t.n_bytes))
        pos += pad(t.n_bytes)
    return out


def weights_by_device(plan: TensorPlan, placement: Placement) -> WeightsByDevice:
    dev = [0] * placement.n_devices
    host = 0
    host_ranges = []
    for t, rng in zip(plan.tensors, _file_offsets(plan), strict=True):
        d = placement.device_of(t)
        if d == CPU:
            host += t.n_bytes
            host_ranges.append(rng)
        else:
            dev[d] += t.n_bytes
    names = {t.name for t in plan.tensors}
    if "output.weight" not in names and placement.output_device != CPU:
        # tied output: a second copy of token_embd on the output layer's GPU
        dev[placement.output_device] += plan.by_name()["token_embd.weight"].n_bytes
    span = max(e for _, e in host_ranges) - min(s for s, _ in host_ranges) if host_ranges else 0
    return WeightsByDevice(tuple(dev), host, span)
