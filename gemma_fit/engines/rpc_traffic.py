"""What llama.cpp's RPC backend sends over the network for each decoded token (protocol 7, ggml/src/ggml-rpc).

Per RPC device that holds layers, every graph evaluation (llama.cpp's scheduler, ggml-backend.cpp
compute_splits):
- up, one SET_TENSOR each (no reply): the split's input activation (the token embedding from the head's CPU, or the
  previous device's output: RPC servers never copy to each other, so it passes through the head), the positions,
  the attention masks (F16 with flash attention, else F32; one per cache kind the device's layers use: full and
  sliding-window) and the cache's k/v index tensors;
- a GRAPH_RECOMPUTE of a few bytes (the graph itself is resent only when it changes: every 256 cells of context);
- down, one GET_TENSOR: the split's output activation, or the logits (n_vocab float32 per sequence: 1 MiB for
  Gemma's 262,144-token vocabulary) on the device that holds the output layer. This GET is the one round trip:
  the head waits for it before the next device can start.
Message framing: SET_TENSOR 314 bytes before its data (1 command, 8 size, 296 rpc_tensor, 1 flag, 8 offset), a
GET_TENSOR request 321 bytes and its reply 8.
"""

from __future__ import annotations

from gemma_fit.base.record import record
from gemma_fit.memory.estimate import MemoryEstimate
from gemma_fit.model.spec import ModelSpec

SET_TENSOR_FRAMING = 314
GET_TENSOR_REQUEST = 321
GET_TENSOR_REPLY_FRAMING = 8
GRAPH_RECOMPUTE = 13
CELL_PAD = 256  # n_kv is padded to a multiple of 256 cells (llama-kv-cache.cpp)


@record
class RpcTraffic:
    """Per decoded token: the round trips of one step, and the bytes each sequence adds each way."""

    round_trips: int
    up_bytes: float
    down_bytes: float
    logits_bytes: float = 0.0  # of down_bytes: the logits, which a prompt's ubatch returns for its last token only

    def prefill_seconds(self, latency_s: float, bytes_per_s: float, ubatch: int) -> float:
        """One prompt ubatch: the same round trips, every token's activations, one token's logits."""
        per_token = self.up_bytes + self.down_bytes - self.logits_bytes
        return self.round_trips * 2 * latency_s + (ubatch * per_token + self.logits_bytes) / bytes_per_s

    def seconds(self, latency_s: float, bytes_per_s: float, sequences: int = 1) -> float:
        """One step's network time for `sequences` decoded together (latency one way; a round trip is two)."""
        return self.round_trips * 2 * latency_s + sequences * (self.up_bytes + self.down_bytes) / bytes_per_s


def _padded(cells: int) -> int:
    return -(-max(1, cells) // CELL_PAD) * CELL_PAD


def rpc_traffic(model: ModelSpec, est: MemoryEstimate, rpc_devices: frozenset[int], position: int) -> RpcTraffic:
    """The RPC exchanges of one decode step at `position` cells of context per sequence."""
    placement = est.placement
    mask_element = 2 if est.settings.flash_attn != "off" else 4  # F16 with flash attention, F32 without
    full_kv = min(_padded(position), max(est.kv.base_cells, 1))
    swa_kv = min(_padded(position), max(est.kv.swa_cells, 1))
    trips, up, down, logits = 0, 0.0, 0.0, 0.0
    for d in sorted(rpc_devices):
        layers = [spec for spec, dev in zip(model.layers, placement.layer_device, strict=True) if dev == d]
        if not layers and placement.output_device != d:
            continue
        kinds = {spec.is_swa and model.has_swa for spec in layers}
        masks = sum(mask_element * (swa_kv if swa else full_kv) for swa in kinds)
        # k and v cell indices (int64) per cache kind; without flash attention V is transposed and indexed per row
        v_index = 8 if est.settings.flash_attn != "off" else 8 * model.max_n_embd_v_gqa
        index = len(kinds) * (8 + v_index)
        messages = 2 + len(kinds) * 3  # activation, positions, and per cache kind: mask, k idxs, v idxs
        up += 4.0 * model.n_embd + 4 + masks + index + messages * SET_TENSOR_FRAMING + GRAPH_RECOMPUTE
        up += GET_TENSOR_REQUEST
        out = model.n_vocab if placement.output_device == d else model.n_embd
        down += 4.0 * out + GET_TENSOR_REPLY_FRAMING
        logits += 4.0 * model.n_vocab if placement.output_device == d else 0.0
        trips += 1
    return RpcTraffic(trips, up, down, logits)
