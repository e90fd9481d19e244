"""Gemma 4's MTP drafters (model_db/llamacpp/drafters.yaml) as llama.cpp loads and runs them: their tensors, the
GPU memory they add and the cost of one drafting step.

Tensors (llama.cpp's gemma4-assistant loader): the tied embedding n_vocab x n_embd (kept as the output matrix on the
GPU; the input copy stays in the mapped file, and the drafter reads the target's own embedding for its input), the
pre-projection 2 x backbone -> n_embd and the post-projection n_embd -> backbone, and per layer wq, wo (Q-only
attention: the keys and values are the target's), the GeGLU FFN and its norms. Where the published Q8_0 file's size
is known it is the weights figure (the output copy replaces the input one on the GPU); else the tensors are counted
at Q8_0 for matrices and F16 for the two projections (within 1% of the 31B file).

Compute buffer: llama.cpp reserves the drafter's graph for a full ubatch: a measured figure per ubatch token
(drafters.yaml: llama.cpp's CPU build on zero-weight files gemma-fit writes, engines/mtp_file.py) beside the attention
mask over the shared cache, and the logits of one output per slot.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.hardware.spec import Hardware
from gemma_fit.memory.settings import RunSettings
from gemma_fit.speed.batch import Pipeline, StageWork
from gemma_fit.speed.calibration import decode_model
from gemma_fit.speed.vector import vector_pass_s

Q8_0_BYTES_PER_WEIGHT = 34 / 32  # a block of 32 weights: 32 int8 and one f16 scale
F16 = 2
F32 = 4

KERNELS_PER_LAYER = 16  # Gemma layers after ggml-cuda's fusions (speed.graph), the assistant's as the target's


@record
class Drafter:
    id: str
    target: str
    hf_repo: str
    file: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    head_dim_swa: int
    head_dim_full: int
    layer_types: tuple[str, ...]
    backbone: int
    n_vocab: int
    file_bytes: int | None
    file_source: str
    compute_bytes_per_token: int = 0  # measured on llama.cpp (drafters.yaml), beside the attention mask

    @property
    def quant(self) -> str:
        return "Q8_0"  # the published drafter files (ggml-org's mtp-*-Q8_0.gguf)

    def _layer_params(self, kind: str) -> int:
        q = self.n_head * (self.head_dim_full if kind == "full" else self.head_dim_swa)
        return 2 * self.n_embd * q + 3 * self.n_embd * self.n_ff

    @property
    def counted_bytes(self) -> int:
        """The tensors at Q8_0 (matrices) and F16 (projections), norms in F32."""
        matrices = self.n_vocab * self.n_embd + sum(self._layer_params(k) for k in self.layer_types)
        projections = 3 * self.backbone * self.n_embd
        norms = self.n_layer * 5 * self.n_embd + self.n_embd
        return round(matrices * Q8_0_BYTES_PER_WEIGHT + projections * F16 + norms * F32)

    @property
    def weights_bytes(self) -> int:
        return self.file_bytes or self.counted_bytes

    @property
    def params(self) -> int:
        return (self.n_vocab * self.n_embd + sum(self._layer_params(k) for k in self.layer_types)
                + 3 * self.backbone * self.n_embd)

    def compute_bytes(self, s: RunSettings, n_ctx: int) -> int:
        """The drafter context's compute buffer for a ubatch (measured per token, drafters.yaml) and its attention
        mask over the shared cache's n_ctx cells (f16 with flash attention; without it an f32 mask and each head's
        scores), plus its logits output buffer (one output per slot)."""
        u = s.ubatch
        fa = s.flash_attn != "off"
        mask = n_ctx * u * (F16 if fa else F32 + F32 * self.n_head)
        return u * self.compute_bytes_per_token + mask + max(1, s.n_parallel) * self.n_vocab * F32


@cache
def _drafters() -> dict[str, Drafter]:
    rows = read_packaged_yaml("llamacpp/drafters.yaml")["drafters"]
    return {r["target"]: Drafter(r["id"], r["target"], r["hf_repo"], r["gguf"], int(r["n_layer"]), int(r["n_embd"]),
                                 int(r["n_ff"]), int(r["n_head"]), int(r["head_dim_swa"]), int(r["head_dim_full"]),
                                 tuple(r["layer_types"]), int(r["backbone"]), int(r["n_vocab"]),
                                 int(r["file_bytes"]) if r.get("file_bytes") else None, str(r["file_source"]),
                                 int(r["compute_bytes_per_token"]))
            for r in rows}


def drafter_for(target_id: str) -> Drafter:
    """The MTP drafter Google ships for this Gemma 4 model; BadInput for a model without one."""
    d = _drafters().get(target_id)
    if d is None:
        have = ", ".join(sorted(_drafters()))
        raise BadInput(f"--mtp: {target_id} has no MTP drafter (Google ships them for {have}); use --draft MODEL "
                       "for a draft model of its family")
    return d


def has_drafter(target_id: str) -> bool:
    return target_id in _drafters()


def drafter_by_id(draft_id: str) -> Drafter:
    for d in _drafters().values():
        if d.id == draft_id:
            return d
    raise BadInput(f"no MTP drafter {draft_id}")


def mtp_pipeline(d: Drafter, hardware: Hardware, weights_bytes: int | None = None) -> Pipeline:
    """One drafting step on the main GPU: every drafter weight read once (the output matrix over the whole
    vocabulary the largest), its layers' kernels, and the shared KV cache's two source layers read for attention
    (counted at the drafter's width; the target's cache layers it reads are small next to its weights)."""
    read = float(weights_bytes if weights_bytes is not None else d.weights_bytes)
    if not hardware.gpus:  # on the CPU: its decode bandwidth and its threads' matrix rate, as for the target's layers
        from gemma_fit.speed.cpu import cpu_of, decode_bandwidth_gbps, prefill_gflops_per_thread, system_bandwidth_gbps

        rates = cpu_of(hardware)
        bw, _ = decode_bandwidth_gbps(system_bandwidth_gbps(hardware, rates, []), rates)
        per_thread, _ = prefill_gflops_per_thread(rates)
        return Pipeline((StageWork("cpu", read, 0.0, 0.0, 0.0, 2.0 * d.params, bw * 1e9,
                                   per_thread * (rates.threads or 8) * 1e9, 0.0, overlap=False),))
    g = hardware.gpus[0]
    m = decode_model(g)
    nodes = d.n_layer * KERNELS_PER_LAYER + 6
    return Pipeline((StageWork(g.id, read, 0.0, 0.0, 0.0, 2.0 * d.params,
                               (g.memory_bandwidth_gbps or 0) * 1e9 * m.efficiency, 1e15, nodes * m.seconds_per_node,
                               overlap=False, vector_s=vector_pass_s(g, float(d.params))),))


def drafters_table() -> list[dict[str, Any]]:
    """Every drafter as the docs and tests list it."""
    return [{"target": d.target, "drafter": d.id, "file": d.file, "weights_bytes": d.weights_bytes,
             "counted_bytes": d.counted_bytes, "published_bytes": d.file_bytes} for d in _drafters().values()]
