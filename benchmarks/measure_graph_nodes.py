#!/usr/bin/env python3
"""Count the nodes of llama.cpp's compute graph for every Gemma model (and the Llama models the
speed calibration uses), and store them in model_db/llamacpp/graph_nodes.yaml.

Why: at batch size 1 a fast GPU spends a large share of each token launching and finishing small
kernels, one or a few per graph node; Gemma layers have more of them than Llama layers (extra norms,
soft-capping, per-layer embeddings, AltUp, experts), so a per-layer cost calibrated on Llama would
miss. With GGML_SCHED_DEBUG=2 ggml's scheduler lists every compute node of each graph it runs; the
count of the graph that decoded the last token is kept. It depends on the layer structure, not on
the weights or their sizes. (GPU backends fuse a few neighbours, e.g. a norm and its multiply.)

Gemma: the zero-weight file gemma-fit writes for each model. Llama (calibration models): tiny
zero-weight llama-architecture files with 2 and 32 layers, which give nodes = base + per_layer x
n_layer. Needs llama.cpp built by scripts/build_llamacpp.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

OUT = REPO / "model_db" / "llamacpp" / "graph_nodes.yaml"


GLU_OPS = ("GEGLU", "SWIGLU", "GLU")


def fused_kernels(ops: list[str]) -> int:
    """Kernels the CUDA backend launches for this op sequence (views already dropped), after the
    fusions ggml-cuda.cu applies at batch size 1 (ggml_cuda_graph_evaluate_and_capture): RMS_NORM +
    MUL (+ ADD, or + ROPE (+ SET_ROWS)); ROPE + SET_ROWS; gate and up mat-vecs with their GLU; the
    top-k MoE router (SOFT_MAX .. DIV); runs of up to 7 ADDs or MULs. Metal fuses much the same."""
    i, kernels, n = 0, 0, len(ops)
    router = ("SOFT_MAX", "ARGSORT", "GET_ROWS", "SUM_ROWS", "CLAMP", "DIV")
    while i < n:
        kernels += 1
        if ops[i:i + 3] == ["RMS_NORM", "MUL", "ROPE"]:
            i += 4 if ops[i + 3:i + 4] == ["SET_ROWS"] else 3
        elif ops[i:i + 2] == ["RMS_NORM", "MUL"]:
            i += 3 if ops[i + 2:i + 3] == ["ADD"] else 2
        elif ops[i:i + 2] == ["ROPE", "SET_ROWS"]:
            i += 2
        elif ops[i] in ("MUL_MAT", "MUL_MAT_ID") and ops[i + 1:i + 2] == [ops[i]] and \
                ops[i + 2:i + 3] and ops[i + 2] in GLU_OPS:
            i += 3
        elif ops[i] == "SOFT_MAX" and ops[i + 1:i + 2] == ["ARGSORT"]:
            j = i + 1
            while j < n and ops[j] in router[1:]:
                j += 1
            i = j
        elif ops[i] in ("ADD", "MUL"):
            j = i + 1
            while j < n and ops[j] == ops[i] and j - i < 7:
                j += 1
            i = j
        else:
            i += 1
    return kernels


def graph_nodes(binary: Path, gguf: Path) -> dict[str, int]:
    """Compute nodes (views, reshapes and permutes excluded: they launch nothing) of the graph that
    generated the last token, as ggml's scheduler lists them with GGML_SCHED_DEBUG=2."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent), "GGML_SCHED_DEBUG": "2"}
    out = subprocess.run([str(binary), "-m", str(gguf), "-c", "512", "-n", "1", "-p", "hi", "-no-cnv", "-v"],
                         capture_output=True, text=True, errors="replace", env=env, timeout=900)
    graphs = (out.stdout + out.stderr).split("## SPLIT #0")
    ops = re.findall(r"node #\s*\d+ \(\s*([A-Z_0-9]+)\)", graphs[-1]) if len(graphs) > 1 else []
    if not ops:
        raise RuntimeError(f"no graph listing from {gguf.name}: {(out.stdout + out.stderr)[-800:]}")
    return {"nodes": len(ops), "matmul_nodes": sum(op in ("MUL_MAT", "MUL_MAT_ID") for op in ops),
            "kernels": fused_kernels(ops)}


def tiny_llama(path: Path, n_layer: int) -> None:
    """A zero-weight llama-architecture file: 64-wide, 4 heads, a 259-token byte vocabulary."""
    from gguf import GGUFWriter

    n_embd, n_ff, n_vocab = 64, 128, 259
    w = GGUFWriter(path, arch="llama")
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_rope_dimension_count(n_embd // 4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [6] * 256)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    z = np.zeros

    w.add_tensor("token_embd.weight", z((n_vocab, n_embd), np.float32))
    w.add_tensor("output_norm.weight", z(n_embd, np.float32))
    w.add_tensor("output.weight", z((n_vocab, n_embd), np.float32))
    for i in range(n_layer):
        for name, shape in (("attn_norm", (n_embd,)), ("attn_q", (n_embd, n_embd)), ("attn_k", (n_embd, n_embd)),
                            ("attn_v", (n_embd, n_embd)), ("attn_output", (n_embd, n_embd)), ("ffn_norm", (n_embd,)),
                            ("ffn_gate", (n_ff, n_embd)), ("ffn_up", (n_ff, n_embd)), ("ffn_down", (n_embd, n_ff))):
            w.add_tensor(f"blk.{i}.{name}.weight", z(shape, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    from build_llamacpp import bin_dir

    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.gguf.writer import write_synthetic_gguf
    from gemma_fit.model.catalog import load_model_db, resolve_model

    binary = bin_dir() / "llama-completion"
    models: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model_id in sorted(load_model_db()):
            spec = resolve_model(model_id).spec
            gguf = Path(tmp) / f"{model_id}.gguf"
            write_synthetic_gguf(build_plan(spec, "Q4_0"), gguf)
            models[model_id] = {"arch": spec.arch, "n_layer": spec.n_layer, **graph_nodes(binary, gguf)}
            gguf.unlink()
            print(f"{model_id:20} {spec.arch:10} {spec.n_layer:3} layers  {models[model_id]['nodes']:5} nodes, "
                  f"{models[model_id]['matmul_nodes']:5} matmuls, {models[model_id]['kernels']:5} fused kernels")
        llama = {}
        for n in (2, 32):
            path = Path(tmp) / f"llama-{n}.gguf"
            tiny_llama(path, n)
            llama[n] = graph_nodes(binary, path)
    per_layer = (llama[32]["nodes"] - llama[2]["nodes"]) / 30
    base = llama[2]["nodes"] - 2 * per_layer
    mm_per_layer = (llama[32]["matmul_nodes"] - llama[2]["matmul_nodes"]) / 30
    mm_base = llama[2]["matmul_nodes"] - 2 * mm_per_layer
    k_per_layer = (llama[32]["kernels"] - llama[2]["kernels"]) / 30
    k_base = llama[2]["kernels"] - 2 * k_per_layer
    print(f"llama: {base:g} + {per_layer:g} x n_layer nodes, {mm_base:g} + {mm_per_layer:g} x n_layer matmuls")
    archs = {}
    for arch in sorted({m["arch"] for m in models.values()}):
        ms = [m for m in models.values() if m["arch"] == arch]
        archs[arch] = {"nodes_per_layer": round(sum(m["nodes"] for m in ms) / sum(m["n_layer"] for m in ms), 2)}
    doc = {
        "source": "benchmarks/measure_graph_nodes.py: llama.cpp 0c1e570 (llama-cpp-python 0.3.36) CPU build, "
                  "GGML_SCHED_DEBUG=2 node listing of a one-token decode graph, zero-weight files gemma-fit writes",
        "note": "compute nodes (views, reshapes, permutes excluded) of the decode graph, of which matrix "
                "products, and the kernels left after the CUDA backend's fusions (fused_kernels); a GPU's "
                "per-token fixed cost at batch size 1 scales with the kernel count",
        "models": models,
        "archs": archs,
        "llama": {"base": round(base, 2), "nodes_per_layer": round(per_layer, 2),
                  "matmul_base": round(mm_base, 2), "matmul_nodes_per_layer": round(mm_per_layer, 2),
                  "kernels_base": round(k_base, 2), "kernels_per_layer": round(k_per_layer, 2),
                  "measured": {f"{n}_layers": v for n, v in llama.items()}},
    }
    OUT.write_text(yaml.safe_dump(doc, sort_keys=False))
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
