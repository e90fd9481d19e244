"""Memory terms against llama.cpp's own allocator (CPU build, exact bytes via llama-mem-probe).

- KV cache: exact to the byte for every model, at several contexts, parallel/unified, SWA and
  cache-type settings.
- Compute buffer: within 5% at the sizing `check` uses (llama-server: one output per sequence,
  flash attention auto) for every model at several contexts and ubatches; the other sizings
  (every ubatch token's logits, flash attention off) within 5% for at least 85% of a matrix and
  never beyond 15% (benchmarks/fit_compute.py prints the full distribution).
- Weights of a CPU-only run: exact.

Every settings below is measured for each model by one llama-mem-probe process (--batch: the model is
loaded once, one context per settings), once per session, shared by the tests and by xdist's workers.
test_batch_answers_as_one_process_each checks that a batch answers as separate processes do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from shared import SynthFiles, once, shared_dir
from test_model_db import CONTRACT_MODELS

from gemma_fit.gguf.tensors import build_plan
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
SERVER_SIZING = [RunSettings(n_ctx=c, n_ubatch=u, n_outputs_max=1) for c, u in
                 [(4096, 512), (32768, 512), (8192, 256), (16384, 1024)]]
OTHER_SIZINGS = [RunSettings(n_ctx=8192), RunSettings(n_ctx=4096, flash_attn="off", n_outputs_max=1),
                 RunSettings(n_ctx=16384, flash_attn="off")]
CPU_ONLY = RunSettings()
ALL_SETTINGS = [*KV_SETTINGS, *SERVER_SIZING, *OTHER_SIZINGS, CPU_ONLY]
QUANT = "Q4_0"


@pytest.fixture(scope="session")
def measured(synth: SynthFiles, llama_bin: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Callable[[str], dict[RunSettings, dict]]:
    """measured(model)[settings]: llama-mem-probe's answer for the model's Q4_0 zero-weight file."""
    from llamacpp_probe import probe_memory_batch

    folder = shared_dir(tmp_path_factory, "mem-probe")
    answers: dict[str, dict[RunSettings, dict]] = {}

    def get(model: str) -> dict[RunSettings, dict]:
        if model not in answers:
            done = folder / f"{model}-{QUANT}.json"

            def probe() -> None:
                out = probe_memory_batch(synth(model, QUANT).path, ALL_SETTINGS, llama_bin)
                tmp = done.with_name(f"{done.name}.{os.getpid()}")
                tmp.write_text(json.dumps(out))
                tmp.replace(done)

            once(done, probe)
            answers[model] = dict(zip(ALL_SETTINGS, json.loads(done.read_text()), strict=True))
        return answers[model]

    return get


def _sum(measured: dict, key: str) -> int:
    return sum(b[key] for b in measured["buffers"].values())


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_kv_cache_is_exact(model: str, measured: Callable[[str], dict[RunSettings, dict]]) -> None:
    spec = resolve_model(model).spec
    for s in KV_SETTINGS:
        m = measured(model)[s]
        assert m["n_ctx"] == s.resolved_ctx(spec), s
        assert _sum(m, "context") == kv_cache_layout(spec, s).total_bytes, s


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_compute_buffer_within_5pct_as_check_sizes_it(model: str, measured: Callable[[str], dict[RunSettings, dict]]
                                                      ) -> None:
    spec = resolve_model(model).spec
    for s in SERVER_SIZING:
        m = _sum(measured(model)[s], "compute")
        predicted = compute_phases(spec, s, kv_cache_layout(spec, s)).total
        assert predicted == pytest.approx(m, rel=0.05), (s, m, predicted)


def test_compute_buffer_other_sizings(measured: Callable[[str], dict[RunSettings, dict]]) -> None:
    errors = []
    for model in CONTRACT_MODELS:
        spec = resolve_model(model).spec
        for s in OTHER_SIZINGS:
            m = _sum(measured(model)[s], "compute")
            predicted = compute_phases(spec, s, kv_cache_layout(spec, s)).total
            errors.append(abs(predicted - m) / m)
    assert max(errors) < 0.15
    assert sum(e <= 0.05 for e in errors) / len(errors) >= 0.85


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_cpu_only_weights_are_exact(model: str, measured: Callable[[str], dict[RunSettings, dict]]) -> None:
    m = _sum(measured(model)[CPU_ONLY], "model")
    expected = cpu_only_weights_bytes(build_plan(resolve_model(model).spec, QUANT))
    assert m == pytest.approx(expected, abs=64 * 1024)  # Gemma 4 rope_freqs copies: < 64 KiB


@pytest.mark.parametrize("model", ["gemma-3n-E2B", "gemma-4-26B-A4B"])
def test_batch_answers_as_one_process_each(model: str, synth: SynthFiles, llama_bin: Path,
                                           measured: Callable[[str], dict[RunSettings, dict]]) -> None:
    """A context made on a model that earlier contexts were made on (and freed) allocates what a fresh
    process allocates: one process per settings, as the probe ran before it had --batch, gives the same JSON."""
    from llamacpp_probe import probe_memory

    for s in (KV_SETTINGS[-1], SERVER_SIZING[1], CPU_ONLY):
        assert probe_memory(synth(model, QUANT).path, s, llama_bin) == measured(model)[s], s
