"""How many compute nodes llama.cpp's graph has for a model, how many are matrix products, and how
many kernels a GPU launches for them once neighbouring nodes are fused. At batch size 1 decode's
per-token fixed cost scales with the kernel count; in prefill each non-matmul kernel streams the
ubatch's activations.

Counts are measured by llama.cpp itself for every model in model_db (model_db/llamacpp/
graph_nodes.yaml, benchmarks/measure_graph_nodes.py). A model not measured (a config.json, a GGUF
of another size) takes the per-layer counts of the measured model of its architecture with the same
layer structure (experts, per-layer embeddings); other architectures take the llama rule.
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.model.spec import ModelSpec


@record
class GraphNodes:
    nodes: int  # compute nodes of a one-token decode graph (views and reshapes excluded)
    matmul_nodes: int  # of which MUL_MAT / MUL_MAT_ID
    kernels: int  # launches left after the GPU backend fuses neighbouring nodes
    source: str


@cache
def _table() -> dict:
    return read_packaged_yaml("llamacpp/graph_nodes.yaml")


def _structure(spec: ModelSpec) -> tuple[bool, bool]:
    return spec.n_expert > 0, spec.n_embd_per_layer > 0


@cache
def _measured() -> tuple[tuple[str, ModelSpec, dict], ...]:
    """(model id, spec, measured row) of every measured model: the built-in cards' specs (a snapshot, no
    schema or YAML to load)."""
    from gemma_fit.model.catalog import model_cards

    cards = model_cards()
    return tuple((model_id, cards[model_id].spec, m)
                 for model_id, m in _table()["models"].items() if model_id in cards)


def graph_nodes(spec: ModelSpec) -> GraphNodes:
    """Counts for a model: measured where it is one of model_db's (matched by id, or by its shape when
    it comes from a GGUF or config.json), else scaled per layer from the closest measured model of the
    same architecture and layer structure."""
    def closeness(item: tuple[str, ModelSpec, dict]) -> tuple[bool, bool, int, int]:
        _, other, _ = item
        return (_structure(other) != _structure(spec), other.n_layer != spec.n_layer,
                abs(other.n_embd - spec.n_embd), abs(other.n_layer - spec.n_layer))

    known = _table()["models"].get(spec.id.lower())  # model_db keys are lower-case ids
    if known and known["n_layer"] == spec.n_layer:
        return GraphNodes(int(known["nodes"]), int(known["matmul_nodes"]), int(known["kernels"]),
                          "measured with llama.cpp")
    same_arch = sorted((item for item in _measured() if item[1].arch == spec.arch), key=closeness)
    if same_arch:
        model_id, other, m = same_arch[0]
        if other.n_layer == spec.n_layer and other.n_embd == spec.n_embd and _structure(other) == _structure(spec):
            return GraphNodes(int(m["nodes"]), int(m["matmul_nodes"]), int(m["kernels"]),
                              f"measured with llama.cpp ({model_id}, same shape)")
        scale = spec.n_layer / m["n_layer"]
        return GraphNodes(round(m["nodes"] * scale), round(m["matmul_nodes"] * scale), round(m["kernels"] * scale),
                          f"per-layer counts measured for {model_id}")
    # no measured model of this architecture (llama, qwen2, qwen3, mistral3 files): llama's per-layer
    # counts, the same dense attention + gated FFN block, labelled as the fallback they are
    g = llama_graph_nodes(spec.n_layer)
    if spec.arch == "llama":
        return g
    return GraphNodes(g.nodes, g.matmul_nodes, g.kernels, f"llama's counts per layer (no {spec.arch} model measured)")


def llama_graph_nodes(n_layer: int) -> GraphNodes:
    """Counts of a llama-architecture model (the speed calibration's benchmark models)."""
    llama = _table()["llama"]
    return GraphNodes(round(llama["base"] + llama["nodes_per_layer"] * n_layer),
                      round(llama["matmul_base"] + llama["matmul_nodes_per_layer"] * n_layer),
                      round(llama["kernels_base"] + llama["kernels_per_layer"] * n_layer),
                      "llama's counts per layer")
