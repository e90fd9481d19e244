"""Memory terms against llama.cpp's own allocator (CPU build, exact bytes via llama-mem-probe).

- KV cache: exact to the byte for every model, at several contexts, parallel/unified, SWA and
  cache-type settings.
- Compute buffer: within 5% at the sizing `check` uses (llama-server: one output per sequence,
  flash attention auto) for every model at several contexts and ubatches; the other sizings
  (every ubatch token's logits, flash attention off) within 5% for at least 85% of a matrix and
  never beyond 15% (benchmarks/fit_compute.py prints the full distribution).
- Weights of a CPU-only run: exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_model_db import CONTRACT_MODELS

from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.writer import write_synthetic_gguf
from gemma_fit.memory.compute_buffer import compute_phases
from gemma_fit.memory.estimate import cpu_only_weights_bytes
from gemma_fit.memory.kv_cache import kv_cache_layout
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model

pytestmark = pytest.mark.llamacpp

KV_SETTINGS = [
    RunSettings(n_ctx=4096),
    RunSettings(n_ctx=5000, n_ubatch=256),
    RunSettings(n_ctx=8192, n_parallel=3),
    RunSettings(n_ctx=8192, n_parallel=4, kv_unified=True),
    RunSettings(n_ctx=4096, flash_attn="off"),
    RunSettings(n_ctx=4096, swa_full=True),
    RunSettings(n_ctx=6000, cache_type_k="q8_0", cache_type_v="q4_0", flash_attn="on"),
    RunSettings(n_ctx=12288, cache_type_k="bf16", cache_type_v="q5_1", n_ubatch=1024, n_batch=1024),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mem")
    out = {}
    for model in CONTRACT_MODELS:
        out[model] = folder / f"{model}.gguf"
        write_synthetic_gguf(build_plan(resolve_model(model).spec, "Q4_0"), out[model])
    return out


def _sum(measured: dict, key: str) -> int:
    return sum(b[key] for b in measured["buffers"].values())


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_kv_cache_is_exact(model: str, files: dict[str, Path], llama_bin: Path) -> None:
    from llamacpp_probe import probe_memory

    spec = resolve_model(model).spec
    for s in KV_SETTINGS:
        measured = probe_memory(files[model], s, llama_bin)
        assert measured["n_ctx"] == s.resolved_ctx(spec), s
        assert _sum(measured, "context") == kv_cache_layout(spec, s).total_bytes, s


SERVER_SIZING = [RunSettings(n_ctx=c, n_ubatch=u, n_outputs_max=1) for c, u in
                 [(4096, 512), (32768, 512), (8192, 256), (16384, 1024)]]


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_compute_buffer_within_5pct_as_check_sizes_it(model: str, files: dict[str, Path], llama_bin: Path) -> None:
    from llamacpp_probe import probe_memory

    spec = resolve_model(model).spec
    for s in SERVER_SIZING:
        measured = _sum(probe_memory(files[model], s, llama_bin), "compute")
        predicted = compute_phases(spec, s, kv_cache_layout(spec, s)).total
        assert predicted == pytest.approx(measured, rel=0.05), (s, measured, predicted)


def test_compute_buffer_other_sizings(files: dict[str, Path], llama_bin: Path) -> None:
    from llamacpp_probe import probe_memory

    errors = []
    for model in CONTRACT_MODELS:
        spec = resolve_model(model).spec
        for s in (RunSettings(n_ctx=8192), RunSettings(n_ctx=4096, flash_attn="off", n_outputs_max=1),
                  RunSettings(n_ctx=16384, flash_attn="off")):
            measured = _sum(probe_memory(files[model], s, llama_bin), "compute")
            predicted = compute_phases(spec, s, kv_cache_layout(spec, s)).total
            errors.append(abs(predicted - measured) / measured)
    assert max(errors) < 0.15
    assert sum(e <= 0.05 for e in errors) / len(errors) >= 0.85


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_cpu_only_weights_are_exact(model: str, files: dict[str, Path], llama_bin: Path) -> None:
    from llamacpp_probe import probe_memory

    measured = _sum(probe_memory(files[model], RunSettings(), llama_bin), "model")
    expected = cpu_only_weights_bytes(build_plan(resolve_model(model).spec, "Q4_0"))
    assert measured == pytest.approx(expected, abs=64 * 1024)  # Gemma 4 rope_freqs copies: < 64 KiB
