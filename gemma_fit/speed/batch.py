"""Decode with many sequences at once: the time of one batched step, for every engine.

One decode step generates one token for each of B sequences. Per device (or pipeline stage):
- the weight matrices are read once for all B (for a mixture of experts, the experts the B tokens route
  to: with k of n experts per token, a share 1 - (1 - k/n)^B of them);
- the matrix products cost B x 2 x parameters FLOPs. With vLLM's GEMMs a device is bound by whichever of
  the two is slower (a roofline: memory-bound at small B, compute-bound past the device's ridge point);
  llama.cpp's kernels do not overlap them: each sequence past the first adds its own share, the larger of
  its matrix FLOPs at the prefill's rate and a fixed share of one token's weight pass (measured with
  llama-batched-bench: ~0.7 ms per sequence on a DGX Spark with Gemma 3 4B, ~2.5 ms on a Strix Halo with
  Gemma 4 12B, about a fifteenth of each one's weight pass; benchmarks/data/serving_runs.csv);
- attention reads each sequence's own KV cache, so that part grows with B whatever the batch;
- a fixed cost per step (kernel launches, the engine's scheduler) does not grow with B;
- tensor-parallel ranks all-reduce the hidden state of every token twice per layer.
Aggregate throughput = B / step seconds; each user sees 1 / step seconds. The engines supply the rates
(llama.cpp's, vLLM's or transformers' kernels); this module only adds them up.
"""

from __future__ import annotations

import math

from gemma_fit.base.record import record


@record
class StageWork:
    """One device's share of a decode step (a tensor-parallel rank's share when tp > 1), in bytes and FLOPs,
    and the rates that device reaches with this engine."""

    name: str
    shared_bytes: float  # weights every step reads once, whatever the batch (dense matrices, norms, output)
    expert_bytes: float  # all routed-expert bytes here; a step reads those its tokens route to
    expert_share: float  # n_expert_used / n_expert (0: a dense model)
    kv_bytes_per_seq: float  # KV cache one sequence's token reads
    flops_per_token: float  # matrix FLOPs per generated token
    bytes_s: float  # memory bandwidth the engine's kernels reach
    flops_s: float  # matrix FLOP/s the engine's kernels reach on a large batch
    fixed_s: float  # per step: kernel launches, the engine's own overhead
    allreduce_per_step: int = 0  # tensor parallel: all-reduces per step (two per layer)
    allreduce_latency_s: float = 0.0
    allreduce_bytes_per_seq: float = 0.0  # bytes each rank sends per sequence per all-reduce
    link_bytes_s: float = 0.0
    overlap: bool = True  # reading and multiplying overlap (a roofline); False: each sequence past the first adds
    # its arithmetic to the read (llama.cpp's kernels)
    reread: float = 0.0  # overlap False: the share of one token's weight pass each further sequence costs at least
    # llama.cpp on Metal: a batch wider than `tile_from` columns leaves the matrix-vector kernels for the tiled
    # matrix-matrix one, which pads the batch to whole tiles of `tile` columns and runs them at `tile_flops_s`
    tile_from: int = 0  # 0: no such switch (the matrix-vector path's cost grows smoothly)
    tile: int = 0
    tile_flops_s: float = 0.0
    # llama.cpp on Metal: the batch's columns its matrix-vector kernels take in one pass over the weights, for
    # batches of 2, 3, ... (a batch wider than a pass reads the weights again); () where one pass takes them all
    columns_per_pass: tuple[int, ...] = ()
    # llama.cpp: one token's matrix-vector arithmetic where the chip's kernels are bound by it rather than by the read
    # (vector.vector_pass_s: an M1 Max's); a step's weight pass takes at least this long. 0: the read binds
    vector_s: float = 0.0


def experts_touched(share: float, batch: int) -> float:
    """Expected share of a layer's experts that `batch` independent tokens route to."""
    return 1.0 - (1.0 - share) ** batch if share else 0.0


def stage_step_s(w: StageWork, batch: int, kv_seqs: int | None = None) -> float:
    """Seconds one device spends on a step of `batch` tokens, one per sequence unless `kv_seqs` says the tokens
    belong to fewer sequences (speculative verification: k + 1 tokens of one sequence read its KV cache once)."""
    weights = w.shared_bytes + w.expert_bytes * experts_touched(w.expert_share, batch)
    memory = max(weights / w.bytes_s, w.vector_s) if w.bytes_s else float("inf")
    compute = batch * w.flops_per_token / w.flops_s if w.flops_s else 0.0
    attention = (batch if kv_seqs is None else kv_seqs) * w.kv_bytes_per_seq / w.bytes_s if w.bytes_s else float("inf")
    comm = 0.0
    if w.allreduce_per_step:
        move = batch * w.allreduce_bytes_per_seq / w.link_bytes_s if w.link_bytes_s else 0.0
        comm = w.allreduce_per_step * (w.allreduce_latency_s + move)
    matmul = max(memory, compute) if w.overlap else memory + _further_s(w, batch, memory)
    return matmul + attention + w.fixed_s + comm


def _tiled(w: StageWork, batch: int) -> bool:
    return not w.overlap and bool(w.tile_from) and batch > w.tile_from and w.tile > 0 and w.tile_flops_s > 0


def _token_pass_s(w: StageWork) -> float:
    """One token's weight pass: the dense weights and the experts it routes to (at least its arithmetic)."""
    return max((w.shared_bytes + w.expert_bytes * w.expert_share) / w.bytes_s, w.vector_s) if w.bytes_s else 0.0


def _further_s(w: StageWork, batch: int, memory: float) -> float:
    """llama.cpp: what the sequences past the first add to a step. The single-stream calibration already holds one
    column's work; each further one costs its FLOPs at the matrix rate or `reread` of a weight pass, whichever is
    more, but the step's matrix work never exceeds the batch's sequences run one at a time (each a whole weight
    pass): aggregate throughput does not fall as sequences are added. `memory`: the step's weight read."""
    if batch <= 1:
        return 0.0
    token_pass = _token_pass_s(w)
    if _tiled(w, batch):  # every tile computes its whole width, however few of its columns the batch fills
        tiles = -(-batch // w.tile)
        return max(0.0, min(tiles * w.tile * w.flops_per_token / w.tile_flops_s - memory, batch * token_pass - memory))
    flops_s = w.flops_per_token / w.flops_s if w.flops_s else 0.0
    r = w.columns_per_pass[batch - 2] if 2 <= batch < len(w.columns_per_pass) + 2 else batch
    passes = -(-batch // r)  # each pass reads the weights once, its further columns `reread` of a pass each
    further = max(flops_s * (batch - 1), passes * token_pass * (1 + w.reread * (r - 1)) - memory)
    return max(0.0, min(further, batch * token_pass - memory))


def bound_of(w: StageWork, batch: int) -> str:
    """memory | compute: which side of the roofline this device is on at `batch`."""
    weights = w.shared_bytes + w.expert_bytes * experts_touched(w.expert_share, batch)
    compute = batch * w.flops_per_token / w.flops_s if w.flops_s else 0.0
    memory = max(weights / w.bytes_s, w.vector_s) if w.bytes_s else float("inf")
    if w.bytes_s and w.vector_s > weights / w.bytes_s:
        return "compute"  # the matrix-vector arithmetic outlasts the read (vector.vector_pass_s)
    if not w.overlap:
        compute = _further_s(w, batch, memory)
    return "compute" if w.bytes_s and compute > memory else "memory"


def factor_at(points: tuple[tuple[int, float], ...], batch: int) -> float:
    """A measured factor at `batch` sequences: linear in log2(sequences) between measured points, the nearest one's
    outside them; 1 without any."""
    if not points:
        return 1.0
    if batch <= points[0][0]:
        return points[0][1]
    for (n0, f0), (n1, f1) in zip(points, points[1:], strict=False):
        if batch <= n1:
            t = (math.log2(batch) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
            return f0 + t * (f1 - f0)
    return points[-1][1]


@record
class Pipeline:
    """The devices one request's token passes through. Without pipeline parallelism (pp = 1) the stages take
    turns (llama.cpp's layer split, a hybrid GPU + CPU run, llama.cpp RPC) and their times add. With pp > 1
    (vLLM's pipeline parallel) the batch is cut into pp micro-batches that keep every stage busy: a token still
    crosses every stage, but the throughput is set by the slowest stage and one hand-over."""

    stages: tuple[StageWork, ...]
    pp: int = 1
    handover_fixed_s: float = 0.0  # per step, every boundary's latency together (and the logits copy's)
    handover_s_per_seq: float = 0.0  # per step and sequence: its hidden state (and logits) across every boundary
    split_s: float = 0.0  # per step: fixed synchronisation a split costs (llama.cpp's GPU/CPU experts)
    # measured / modelled speed of a step on this very machine, (sequences, factor) (gemma-fit bench --save)
    speed_factors: tuple[tuple[int, float], ...] = ()

    def _handover(self, seqs: int) -> float:
        return self.handover_fixed_s + seqs * self.handover_s_per_seq

    def step_s(self, batch: int, kv_seqs: int | None = None) -> float:
        """Seconds between two tokens of one sequence (time per output token) at `batch` sequences (`kv_seqs`: the
        batch's tokens belong to that many sequences, each reading its KV cache once)."""
        if self.pp <= 1:
            step = (sum(stage_step_s(w, batch, kv_seqs) for w in self.stages) + self._handover(batch)
                    + self.split_s)
            return step / factor_at(self.speed_factors, batch)
        micro = max(1, -(-batch // self.pp))
        hop = self._handover(micro) / max(1, self.pp - 1)  # one boundary per period
        period = max(stage_step_s(w, micro) for w in self.stages) + hop + self.split_s
        return period * self.pp / factor_at(self.speed_factors, batch)

    def aggregate_tokens_per_s(self, batch: int) -> float:
        """Tokens/s of all `batch` sequences together; with pp > 1 the micro-batches overlap."""
        return batch / self.step_s(batch) if batch > 0 else 0.0

    def bound(self, batch: int) -> str:
        micro = max(1, -(-batch // self.pp)) if self.pp > 1 else batch
        slowest = max(self.stages, key=lambda w: stage_step_s(w, micro))
        return bound_of(slowest, micro)
