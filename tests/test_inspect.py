"""`inspect` and `check --gguf` answer from a file's header exactly as `check` does from the database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shared import SynthFiles
from test_model_db import CONTRACT_MODELS

from gemma_fit.engines.llamacpp import run_check
from gemma_fit.gguf.from_file import plan_from_gguf, spec_from_gguf
from gemma_fit.gguf.reader import read_gguf_header
from gemma_fit.hardware.select import select_hardware
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel, resolve_model
from gemma_fit.present.documents import check_json

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]
SAME = ("memory", "verdict", "max_ctx_fit", "performance", "settings")


@pytest.mark.parametrize("model", CONTRACT_MODELS)
@pytest.mark.parametrize("quant", ["Q4_K_M", "Q8_0"])
def test_inspect_of_a_synth_file_equals_check(model: str, quant: str, synth: SynthFiles) -> None:
    resolved = resolve_model(model)
    header = read_gguf_header(synth(model, quant).path)
    spec = spec_from_gguf(header)
    from_file = check_json(run_check(ResolvedModel(spec, None, "file"), quant, RunSettings(n_ctx=8192),
                                     select_hardware(["rtx-4090"], None, ()), plan=plan_from_gguf(header, spec)))
    from_db = check_json(run_check(resolved, quant, RunSettings(n_ctx=8192), select_hardware(["rtx-4090"], None, ())))
    for key in SAME:
        assert from_file[key] == from_db[key], key
    assert from_file["model"]["n_params"] == from_db["model"]["n_params"]


def test_inspect_cli_json_keys(tmp_path: Path) -> None:
    path = tmp_path / "g.gguf"
    subprocess.run([*CLI, "synth", str(path), "--model", "gemma-3-1b", "--quant", "Q4_K_M"], check=True,
                   capture_output=True)
    doc = json.loads(subprocess.run([*CLI, "inspect", str(path), "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert doc["schema"] == "gemma-fit.inspect/1" and doc["arch"] == "gemma3"
    assert doc["file_size_bytes"] == path.stat().st_size and doc["n_ctx_train"] == 32768
    assert sum(doc["tensor_types"].values()) == 340
    with_gpu = subprocess.run([*CLI, "inspect", str(path), "--gpu", "a4000", "--json"], capture_output=True,
                              text=True)
    assert with_gpu.returncode == 0
    full = json.loads(with_gpu.stdout)
    assert full["schema"] == "gemma-fit.inspect/1" and full["verdict"] == "go" and full["memory"]["devices"]


def test_check_gguf_and_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "not a model.gguf"
    bad.write_bytes(b"GGUF" + b"\\xff" * 40)
    proc = subprocess.run([*CLI, "check", "--gguf", str(bad), "--gpu", "a4000"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([*CLI, "check", "--gpu", "a4000"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--model ID" in proc.stderr


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral3"])
def test_inspect_non_gemma_file_with_a_gpu(arch: str, tmp_path: Path) -> None:
    """Every architecture inspect reads also answers with --gpu: a verdict and a performance block
    (speed from llama's per-layer kernel counts where no model of the architecture was measured)."""
    from test_gguf_reader import _write_dense

    path = tmp_path / f"tiny-{arch}.gguf"
    _write_dense(path, arch, tied=arch == "qwen2", bias=arch == "qwen2")
    proc = subprocess.run([*CLI, "inspect", str(path), "--gpu", "rtx-4090", "--json"], capture_output=True,
                          text=True)
    assert proc.returncode in (0, 3, 4), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["arch"] == arch and doc["model"]["arch"] == arch
    assert doc["verdict"] in ("go", "tight", "offload", "no-go") and doc["memory"]["devices"]
    assert doc["file_size_bytes"] == path.stat().st_size
    if doc["verdict"] != "no-go":
        perf = doc["performance"]
        assert perf is not None and perf["decode_tokens_per_s"] > 0 and perf["prefill_tokens_per_s"] > 0


def test_non_gemma_graph_nodes_are_a_labelled_llama_fallback() -> None:
    from dataclasses import replace

    from gemma_fit.speed.graph import graph_nodes, llama_graph_nodes

    spec = resolve_model("gemma-3-1b").spec
    for arch in ("llama", "qwen2", "qwen3", "mistral3"):
        g = graph_nodes(replace(spec, arch=arch, id=f"x-{arch}"))
        want = llama_graph_nodes(spec.n_layer)
        assert (g.nodes, g.matmul_nodes, g.kernels) == (want.nodes, want.matmul_nodes, want.kernels)
        assert g.source == want.source if arch == "llama" else f"no {arch} model measured" in g.source
