"""Engines beyond llama.cpp: worked examples from each engine's cited rules (docs/engines.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.base.units import GIB
from gemma_fit.engines import registry
from gemma_fit.engines.base import CheckRequest, CheckResult, EnginePlan, Workload
from gemma_fit.engines.hf_weights import hf_weight_bytes, param_breakdown
from gemma_fit.engines.transformers_hf import kv_cache_bytes
from gemma_fit.engines.vllm import CUDA_GRAPH_BYTES, NON_TORCH_BYTES, activation_peak
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel, resolve_model
from gemma_fit.present.documents import engine_check_json


def _test_gpu(i: int, name: str, capacity: int) -> GPUSpec:
    return GPUSpec(id=f"gpu{i}", name=name, vendor="nvidia", backend="cuda", memory_bytes=capacity,
                   usable_memory_bytes=capacity, unified_memory=False, memory_bandwidth_gbps=None,
                   fp16_tensor_tflops=None, arch="test", compute_capability=None, pcie_gen=None, pcie_lanes=None,
                   nvlink_gbps=None, tdp_w=None, source="test")


def FakeHardware(*caps_gib: float, name: str = "Test GPU") -> Hardware:  # noqa: N802 - reads like the class it was
    """GPUs of the given capacities (what the engines read: capacity, name, backend), 64 GiB of host RAM."""
    gpus = tuple(_test_gpu(i, name, int(c * GIB)) for i, c in enumerate(caps_gib))
    return Hardware(label=name, gpus=gpus, host_capacity_bytes=64 * GIB)


_FLASH = {None: "auto", True: "on", False: "off"}


def estimate(r: ResolvedModel, engine: str, quant: str, hw: Hardware, *, max_model_len: int = 0,
             max_num_seqs: int = 1, prompt_tokens: int = 512, flash_attention: bool | None = None,
             **options: object) -> CheckResult[EnginePlan]:
    """An engine's estimate as `check` asks it: llama.cpp's settings, the workload, the engine's own options."""
    settings = RunSettings(n_ctx=max_model_len, n_parallel=max_num_seqs, flash_attn=_FLASH[flash_attention])  # type: ignore[arg-type]
    return registry.estimate(engine, CheckRequest(r, quant, settings, hw, Workload(prompt_tokens), options))


def _vllm(model: str, hw: Hardware, **kw):
    r = resolve_model(model)
    return r, estimate(r, "vllm", kw.pop("quant", "bf16"), hw, **kw)


# ---- vLLM: KV budget and paged blocks (vLLM 0.33.0 gpu_worker.py / kv_cache_planning.py) ----------

def test_vllm_gemma3_12b_budget_blocks_and_concurrency() -> None:
    hw = FakeHardware(80.0, name="H100 80GB")
    r, res = _vllm("gemma-3-12b", hw, max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=256)
    spec = r.spec
    cap = int(80 * GIB)
    weights = hf_weight_bytes(spec, "bf16")
    act = activation_peak(spec, 8192, 256, 1)
    budget = math.ceil(cap * 0.92) - weights - act - NON_TORCH_BYTES - CUDA_GRAPH_BYTES
    # 48 layers, 40 sliding + 8 full, 8 KV heads x 256, bf16: 2 x 8 x 256 x 2 = 8192 bytes per token per layer.
    page = 16 * 8192
    group_size = 8  # min(40, 8); 40 sliding layers -> 5 groups, 8 full -> 1 group
    block_bytes = group_size * page
    num_blocks = budget // block_bytes
    full_blocks = 32768 // 16
    swa_blocks = math.ceil(min(1024 - 1 + 2 * 8192, 32768) / 16) + 1
    per_request = 1 * full_blocks + 5 * swa_blocks
    x = res.detail.extras
    assert x["kv_cache_budget_bytes"] == budget
    assert x["kv_block_bytes"] == block_bytes
    assert x["kv_num_blocks"] == num_blocks
    assert x["kv_blocks_per_request"] == per_request
    assert x["max_concurrent_tokens"] == int(num_blocks / per_request * 32768)
    assert res.detail.devices[0].kv_cache_bytes == num_blocks * block_bytes
    assert res.verdict == "go"
    assert "--max-model-len 32768" in res.command and res.command.startswith("vllm serve google/gemma-3-12b-it")


def test_vllm_sliding_window_costs_less_than_full_attention() -> None:
    hw = FakeHardware(80.0)
    _, short = _vllm("gemma-3-12b", hw, max_model_len=8192, max_num_batched_tokens=2048)
    _, long = _vllm("gemma-3-12b", hw, max_model_len=65536, max_num_batched_tokens=2048)
    # sliding groups hold the window + in-flight tokens however long the request: per-request blocks grow
    # only by the full-attention group's blocks.
    grow = long.detail.extras["kv_blocks_per_request"] - short.detail.extras["kv_blocks_per_request"]
    assert grow == (65536 - 8192) // 16


def test_vllm_defaults_depend_on_gpu() -> None:
    _, big = _vllm("gemma-3-4b", FakeHardware(141.0, name="H200"), max_model_len=4096)
    _, small = _vllm("gemma-3-4b", FakeHardware(24.0, name="RTX 4090"), max_model_len=4096)
    _, a100 = _vllm("gemma-3-4b", FakeHardware(80.0, name="A100 80GB"), max_model_len=4096)
    assert (big.detail.extras["max_num_batched_tokens"], big.detail.extras["max_num_seqs"]) == (8192, 1024)
    assert (small.detail.extras["max_num_batched_tokens"], small.detail.extras["max_num_seqs"]) == (2048, 256)
    assert a100.detail.extras["max_num_batched_tokens"] == 2048


def test_vllm_gemma4_shared_kv_layers_own_no_cache() -> None:
    r = resolve_model("gemma-4-E2B")
    spec = r.spec
    owners = [la for la in spec.layers if la.has_kv]
    assert len(owners) < spec.n_layer
    hw = FakeHardware(80.0)
    res = estimate(r, "vllm", "bf16", hw, max_model_len=8192)
    # page bytes per block only count KV-owning layers: with all layers owning KV the pool would hold
    # fewer tokens.
    per_token_owners = sum(2 * la.n_embd_k_gqa * 2 for la in owners)
    per_token_all = sum(2 * la.n_embd_k_gqa * 2 for la in spec.layers)
    assert per_token_owners < per_token_all
    assert any("KV-shared" in x for x in res.reasons)


def test_vllm_no_room_is_no_go_and_says_no_offload() -> None:
    _, res = _vllm("gemma-3-27b", FakeHardware(24.0), max_model_len=4096)
    assert res.verdict == "no-go"
    assert "does not offload" in res.reasons[0]


def test_vllm_too_long_context_is_no_go_with_the_length_that_fits() -> None:
    _, res = _vllm("gemma-3-27b", FakeHardware(24.0), quant="awq", max_model_len=131072)
    assert res.verdict == "no-go"
    assert 0 < res.max_ctx_fit < 131072
    _, ok = _vllm("gemma-3-27b", FakeHardware(24.0), quant="awq", max_model_len=res.max_ctx_fit)
    assert ok.detail.extras["max_concurrency"] >= 1


def test_vllm_fp8_kv_cache_doubles_the_tokens() -> None:
    hw = FakeHardware(80.0)
    _, bf = _vllm("gemma-3-12b", hw, max_model_len=8192)
    _, f8 = _vllm("gemma-3-12b", hw, max_model_len=8192, kv_cache_dtype="fp8")
    assert f8.detail.extras["kv_block_bytes"] * 2 == bf.detail.extras["kv_block_bytes"]
    blocks = bf.detail.extras["kv_num_blocks"]
    assert f8.detail.extras["kv_num_blocks"] in (2 * blocks, 2 * blocks + 1)


# ---- weights: quant formats, MoE total vs active -------------------------------------------------

def test_weight_bytes_by_format() -> None:
    spec = resolve_model("gemma-3-12b").spec
    p = param_breakdown(spec)
    assert hf_weight_bytes(spec, "bf16") == 2 * p.total
    assert hf_weight_bytes(spec, "bnb-8bit") == p.linear + 2 * (p.embedding + p.other)
    assert hf_weight_bytes(spec, "bnb-4bit") == int(p.linear * (0.5 + 4 / 64)) + 2 * (p.embedding + p.other)


def test_moe_weights_count_all_experts_active_counts_top_k() -> None:
    spec = resolve_model("gemma-4-26B-A4B").spec
    p = param_breakdown(spec)
    assert p.experts == spec.n_layer * 3 * spec.n_embd * spec.n_ff_exp * spec.n_expert
    assert p.experts_active == p.experts * 8 // 128
    assert 25.0e9 < p.total < 25.5e9  # model card: 25.2B total
    assert 3.6e9 < p.active < 4.0e9  # model card: 3.8B active
    assert hf_weight_bytes(spec, "bf16") == 2 * p.total  # every expert resident


# ---- transformers: dynamic and static caches (transformers 5.24.0 cache_utils.py) ----------------

def test_transformers_dynamic_cache_gemma3_at_n_tokens() -> None:
    spec = resolve_model("gemma-3-12b").spec
    per_layer_token = 2 * 8 * 256 * 2  # K + V, 8 KV heads x 256, bf16
    n = 8192
    expected = 8 * n * per_layer_token + 40 * (1024 - 1) * per_layer_token  # sliding keep window - 1
    assert kv_cache_bytes(spec, 1, n, "dynamic") == expected
    short = 500
    assert kv_cache_bytes(spec, 2, short, "dynamic") == 2 * 48 * short * per_layer_token


def test_transformers_static_cache_caps_sliding_layers_at_the_window() -> None:
    spec = resolve_model("gemma-3-12b").spec
    per_layer_token = 2 * 8 * 256 * 2
    assert kv_cache_bytes(spec, 1, 4096, "static") == 8 * 4096 * per_layer_token + 40 * 1024 * per_layer_token
    assert kv_cache_bytes(spec, 1, 600, "static") == 48 * 600 * per_layer_token


def test_transformers_gemma4_shared_kv_fewer_bytes() -> None:
    spec = resolve_model("gemma-4-E2B").spec
    owners = [la for la in spec.layers if la.has_kv]
    n = 2048
    full = sum(2 * la.n_embd_k_gqa * 2 for la in owners if not la.is_swa) * n
    swa = sum(2 * la.n_embd_k_gqa * 2 for la in owners if la.is_swa) * min(n, spec.n_swa - 1)
    assert kv_cache_bytes(spec, 1, n, "dynamic") == full + swa
    every = sum(2 * la.n_embd_k_gqa * 2 * (n if not la.is_swa else min(n, spec.n_swa - 1)) for la in spec.layers)
    assert full + swa < every


def test_transformers_result_and_snippet() -> None:
    r = resolve_model("gemma-3-27b")
    res = estimate(r, "transformers", "bnb-4bit", FakeHardware(24.0), prompt_tokens=1024, max_new_tokens=1024)
    d = res.detail.devices[0]
    assert d.kv_cache_bytes == kv_cache_bytes(r.spec, 1, 2048, "dynamic")
    assert res.verdict in ("go", "tight")
    assert "BitsAndBytesConfig(load_in_4bit=True" in res.command
    bf = estimate(r, "transformers", "bf16", FakeHardware(24.0))
    assert bf.verdict == "no-go" and "does not offload" in bf.reasons[0]


# ---- Ollama: llama.cpp plus its defaults and reserves ---------------------------------------------

def test_ollama_default_context_by_vram_and_reserve() -> None:
    r = resolve_model("gemma-3-4b")
    small = estimate(r, "ollama", "Q4_K_M", FakeHardware(16.0))
    mid = estimate(r, "ollama", "Q4_K_M", FakeHardware(24.0))
    big = estimate(r, "ollama", "Q4_K_M", FakeHardware(80.0))
    assert (small.n_ctx, mid.n_ctx, big.n_ctx) == (4096, 32768, 131072)  # 256k capped at the trained 128k
    d = small.detail.devices[0]
    assert d.overhead_bytes - small.detail.extras["llama_cpp_total_bytes"][0] + d.weights_bytes + d.kv_cache_bytes \
        + d.activation_bytes == 457 * 1024**2
    assert "OLLAMA_CONTEXT_LENGTH=4096" in small.command and "gemma3:4b" in small.command


def test_ollama_quantized_kv_needs_flash_attention() -> None:
    # llm/server.go @5dbb81b7: a quantized OLLAMA_KV_CACHE_TYPE is kept only with flash attention on.
    r = resolve_model("gemma-3-4b")
    off = estimate(r, "ollama", "Q4_K_M", FakeHardware(16.0), kv_cache_dtype="q8_0", flash_attention=False)
    on = estimate(r, "ollama", "Q4_K_M", FakeHardware(16.0), kv_cache_dtype="q8_0", flash_attention=True)
    assert off.detail.extras["OLLAMA_KV_CACHE_TYPE"] == "f16"
    assert on.detail.extras["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    assert on.detail.devices[0].kv_cache_bytes < off.detail.devices[0].kv_cache_bytes


def test_ollama_leaves_flash_attention_to_llama_server() -> None:
    # v0.30.0 and later (llm/llama_server.go @fb30760 LlamaServerFlashAttention): OLLAMA_FLASH_ATTENTION unset
    # passes --flash-attn auto for every model, so a q8_0 cache is honoured for Gemma 2 too; set to 0, the V
    # cache cannot be quantized and stays f16.
    for model in ("gemma-3-4b", "gemma-2-9b"):
        r = estimate(resolve_model(model), "ollama", "Q4_K_M", FakeHardware(16.0), kv_cache_dtype="q8_0")
        assert r.detail.extras["OLLAMA_FLASH_ATTENTION"] is None and r.detail.extras["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
        assert "OLLAMA_FLASH_ATTENTION" not in r.command
    off = estimate(resolve_model("gemma-2-9b"), "ollama", "Q4_K_M", FakeHardware(16.0), kv_cache_dtype="q8_0",
                   flash_attention=False)
    assert off.detail.extras["OLLAMA_KV_CACHE_TYPE"] == "f16" and "OLLAMA_FLASH_ATTENTION=0" in off.command


def test_ollama_context_tiers_use_the_code_thresholds() -> None:
    # server/routes.go @00188139: >= 47 GiB -> 262144, >= 23 GiB -> 32768 (docs say 48/24), of
    # sum(TotalMemory - OLLAMA_GPU_OVERHEAD); capped at the trained context (llm/server.go).
    from gemma_fit.engines.ollama import default_context
    gib = 1024**3
    assert default_context(int(23.99 * gib), 10**6) == 32768  # a "24 GB" card reports a little under 24 GiB
    assert default_context(int(22.9 * gib), 10**6) == 4096
    assert default_context(47 * gib, 10**6) == 262144
    assert default_context(47 * gib, 131072) == 131072
    r = resolve_model("gemma-3-4b")
    res = estimate(r, "ollama", "Q4_K_M", FakeHardware(24.0), gpu_overhead_bytes=2 * gib)
    assert res.n_ctx == 4096  # 24 - 2 GiB overhead < 23 GiB


# ---- unsupported combinations ---------------------------------------------------------------------

@pytest.mark.parametrize(("engine", "quant", "extra"), [
    ("ollama", "awq", {}),
    ("vllm", "Q4_K_M", {}),
    ("transformers", "Q4_K_M", {}),
    ("vllm", "bnb-4bit", {}),
    ("transformers", "nvfp4", {}),
    ("transformers", "bf16", {"tensor_parallel_size": 2}),
    ("vllm", "bf16", {"tensor_parallel_size": 4}),
])
def test_unsupported_combinations_are_bad_input(engine: str, quant: str, extra: dict) -> None:
    r = resolve_model("gemma-3-4b")
    with pytest.raises(BadInput) as exc:
        estimate(r, engine, quant, FakeHardware(80.0, 80.0), **extra)
    assert "\n" not in str(exc.value)


# ---- JSON and the CLI helper ----------------------------------------------------------------------

CONTRACT_DEVICE_KEYS = {"id", "name", "weights_bytes", "kv_cache_bytes", "compute_bytes", "overhead_bytes",
                        "total_bytes", "capacity_bytes", "headroom_bytes"}


@pytest.mark.parametrize(("engine", "quant"), [("vllm", "fp8"), ("transformers", "bf16"), ("ollama", "Q4_K_M")])
def test_engine_json_has_contract_keys(engine: str, quant: str) -> None:
    r = resolve_model("gemma-3-4b")
    request = CheckRequest(r, quant, RunSettings(n_ctx=8192), FakeHardware(48.0), Workload(mmproj=Path("x")))
    doc = engine_check_json(registry.check(engine, request))
    assert doc["schema"] == "gemma-fit.check/1" and doc["engine"] == engine
    assert {"model", "settings", "memory", "verdict", "reasons", "max_ctx_fit", "performance"} <= set(doc)
    for d in doc["memory"]["devices"]:
        assert set(d) >= CONTRACT_DEVICE_KEYS
        assert d["total_bytes"] == d["weights_bytes"] + d["kv_cache_bytes"] + d["compute_bytes"] + d["overhead_bytes"]
    assert doc["verdict"] in ("go", "tight", "offload", "no-go")
    assert engine in doc
    assert doc[engine]["tower_params"] == 417_000_000


def test_engine_json_of_result_roundtrip() -> None:
    r = resolve_model("gemma-3-1b")
    res = estimate(r, "vllm", "bf16", FakeHardware(24.0), max_model_len=4096)
    doc = engine_check_json(res)
    assert doc["vllm"]["kv_num_blocks"] == res.detail.extras["kv_num_blocks"]
    assert doc["settings"]["n_ctx"] == 4096


def test_report_with_an_engine_runs_every_cell() -> None:
    from gemma_fit.jobs.report import run_report
    from gemma_fit.memory.settings import RunSettings

    rep = run_report(["gemma-3-27b", "gemma-2-9b"], ["bf16", "fp8"], [["h100-sxm"], ["rtx-4090"]], [8192],
                     RunSettings(), engine="vllm")
    assert rep["engine"] == "vllm" and len(rep["cells"]) == 8
    assert all(c["verdict"] in ("go", "tight", "offload", "no-go") for c in rep["cells"])


@pytest.mark.parametrize("quant", ["bf16", "fp16", "fp8", "awq-int4", "gptq-int4", "bnb-8bit", "bnb-4bit"])
def test_every_transformers_snippet_is_valid_python(quant: str) -> None:
    res = estimate(resolve_model("gemma-3-12b"), "transformers", quant, FakeHardware(80.0))
    compile(res.detail.extras["python"], f"<transformers {quant}>", "exec")  # a SyntaxError fails the test


def test_vllm_serves_a_published_pre_quantized_checkpoint_and_says_when_there_is_none() -> None:
    awq = estimate(resolve_model("gemma-3-27b"), "vllm", "awq-int4", FakeHardware(24.0))
    assert awq.command.startswith("vllm serve gaunernst/gemma-3-27b-it-qat-autoawq ")
    assert "--quantization" not in awq.command  # the checkpoint carries its config
    for engine, quant in (("vllm", "awq-int4"), ("vllm", "nvfp4"), ("transformers", "gptq-int4")):
        # without a checkpoint the command would load bf16 weights while the estimate counted 4-bit ones
        with pytest.raises(BadInput, match=f"no published {quant} checkpoint of gemma-2-2b is known"):
            estimate(resolve_model("gemma-2-2b"), engine, quant, FakeHardware(24.0))
    fp8 = estimate(resolve_model("gemma-2-2b"), "vllm", "fp8", FakeHardware(24.0))
    assert "--quantization fp8" in fp8.command


def test_vllm_says_when_it_turns_vision_off() -> None:
    r = estimate(resolve_model("gemma-3-27b"), "vllm", "fp8", FakeHardware(48.0))
    assert "--limit-mm-per-prompt '{\"image\": 0}'" in r.command
    assert any(x.startswith("vision off:") for x in r.reasons)


@pytest.mark.parametrize(("model_id", "quant", "tag"), [
    ("gemma-3-27b", "Q4_K_M", "ollama run gemma3:27b"), ("gemma-3-27b", "Q8_0", "ollama run gemma3:27b-it-q8_0"),
    ("gemma-3-27b", "QAT_Q4_0", "ollama run gemma3:27b-it-qat"),
    ("gemma-2-9b", "Q5_K_M", "ollama run gemma2:9b-instruct-q5_K_M"),
    ("gemma-4-26B-A4B", "Q8_0", "ollama run gemma4:26b-a4b-it-q8_0"),
    ("gemma-3-12b", "Q5_K_M", "ollama create gemma-3-12b-q5_k_m -f Modelfile"),
])
def test_ollama_runs_the_tag_that_is_the_quant_or_imports_the_gguf(model_id: str, quant: str, tag: str) -> None:
    r = estimate(resolve_model(model_id), "ollama", quant, FakeHardware(48.0))
    run = r.command.split(" ollama serve & sleep 3; ", 1)[1]  # the server, then the one step that pulls or imports
    assert run == tag or run.startswith(tag + " ") or f"&& {tag} &&" in run


def test_ollama_text_and_table_give_one_set_of_numbers() -> None:
    r = estimate(resolve_model("gemma-3-27b"), "ollama", "Q4_K_M", FakeHardware(24.0))
    d = r.detail.devices[0]
    line = next(x for x in r.reasons if x.startswith(f"{d.name}: needs"))
    from gemma_fit.base.units import fmt_bytes

    assert f"needs {fmt_bytes(d.total_bytes)} of {fmt_bytes(d.capacity_bytes)}" in line
    assert f"overhead {fmt_bytes(d.overhead_bytes)}" in line


def test_vllm_loads_gemma_3_in_float32_on_a_gpu_without_bfloat16() -> None:
    """vLLM refuses float16 for Gemma 2 and 3; on a T4 (no bfloat16) --dtype auto falls back to float32."""
    from gemma_fit.api import check

    t4 = check("gemma-3-4b", ["t4"], engine="vllm")
    spec = resolve_model("gemma-3-4b").spec
    assert t4.quant == "fp32" and "--dtype float32" in t4.command
    assert t4.detail.devices[0].weights_bytes >= 2 * hf_weight_bytes(spec, "bf16") > 14 * GIB
    assert t4.verdict == "no-go"
    assert check("gemma-3-4b", ["a4000"], engine="vllm").quant == "bf16"  # Ampere has bfloat16
    e4b = check("gemma-4-E4B", ["t4"], engine="vllm")
    assert e4b.quant == "fp16" and "--dtype float16" in e4b.command  # Gemma 4 is not on vLLM's no-float16 list
    with pytest.raises(BadInput, match="refuses float16"):
        check("gemma-2-9b", ["a4000"], engine="vllm", quant="fp16")
