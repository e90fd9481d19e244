"""`gemma-fit check`: the contract's JSON, the verdict rules, exit statuses."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_model_db import CONTRACT_MODELS

from gemma_fit.engines.llamacpp import run_check
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.types import CONTRACT_QUANTS
from gemma_fit.hardware.schema import MAX_HOST_RAM_BYTES
from gemma_fit.hardware.select import select_hardware
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import check_json

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def check(model: str, gpus: list[str], quant: str = "Q4_K_M", **kw: object) -> dict:
    result = run_check(resolve_model(model), quant, RunSettings(**kw), select_hardware(gpus, None, ()))
    return check_json(result)


def test_json_has_every_contract_key() -> None:
    doc = check("9b", ["a4000"], "Q5_K_M")
    assert doc["schema"] == "gemma-fit.check/1"
    assert {"id", "quant", "arch", "n_params", "file_size_bytes"} <= set(doc["model"])
    assert {"n_ctx", "n_ubatch", "n_batch", "n_parallel", "flash_attn", "cache_type_k", "cache_type_v",
            "n_gpu_layers", "n_layers_total"} <= set(doc["settings"])
    dev = doc["memory"]["devices"][0]
    assert {"id", "name", "weights_bytes", "kv_cache_bytes", "compute_bytes", "overhead_bytes", "total_bytes",
            "capacity_bytes", "headroom_bytes"} <= set(dev)
    assert all(isinstance(dev[k], int) for k in dev if k.endswith("_bytes"))
    assert dev["total_bytes"] == dev["weights_bytes"] + dev["kv_cache_bytes"] + dev["compute_bytes"] + \
        dev["overhead_bytes"]
    assert dev["headroom_bytes"] == dev["capacity_bytes"] - dev["total_bytes"]
    host = doc["memory"]["host"]
    assert {"weights_bytes", "kv_cache_bytes", "compute_bytes", "total_bytes", "capacity_bytes"} <= set(host)
    assert doc["verdict"] in ("go", "tight", "offload", "no-go")
    assert isinstance(doc["reasons"], list) and isinstance(doc["max_ctx_fit"], int)
    assert doc["settings"]["flash_attn"] in ("on", "off")
    assert doc["llama_server_command"].startswith("llama-server -m ")


def test_a4000_runs_gemma2_9b_q5km_entirely() -> None:
    doc = check("9b", ["a4000"], "Q5_K_M")
    assert doc["verdict"] == "go"
    assert doc["memory"]["devices"][0]["capacity_bytes"] < 16 * 2**30  # 16 GB card, not 24
    assert doc["settings"]["n_gpu_layers"] == doc["settings"]["n_layers_total"] == 43


def test_big_model_on_small_card_offloads_with_layer_count() -> None:
    doc = check("gemma-3-27b", ["rtx-3060-12gb"])
    assert doc["verdict"] == "offload"
    assert 0 < doc["settings"]["n_gpu_layers"] < 63
    assert "layers fit" in doc["reasons"][0]
    assert "fits entirely" in (doc["suggestion"] or "")


def test_no_go_when_nothing_fits() -> None:
    doc = check("gemma-4-31B", ["t4"], "BF16", n_ctx=262144, n_gpu_layers=61)
    assert doc["verdict"] == "no-go"


def test_gemma3_sliding_window_keeps_kv_small_at_128k() -> None:
    doc = check("gemma-3-27b", ["h100-sxm"], "Q4_K_M", n_ctx=131072)
    kv = doc["memory"]["devices"][0]["kv_cache_bytes"]
    # K+V per cell and layer: 2 x 16 heads x 128 x 2 B = 8 KiB; 10 global layers x 131072 cells +
    # 52 SWA layers x 1536 cells = 10.6 GiB, where a full cache on every layer would be 62 GiB
    assert kv == (10 * 131072 + 52 * 1536) * 8192


def test_two_gpus_split_layers_and_output_goes_last() -> None:
    doc = check("gemma-3-27b", ["rtx-4090", "rtx-4090"], "Q8_0")
    a, b = doc["memory"]["devices"]
    assert a["weights_bytes"] > 0 and b["weights_bytes"] > 0
    assert b["compute_bytes"] >= a["compute_bytes"]  # the output layer (logits) is on the last GPU


def test_cpu_only_puts_everything_on_the_host() -> None:
    doc = check("gemma-3-1b", ["cpu"])
    assert doc["memory"]["devices"] == []
    assert doc["memory"]["host"]["capacity_bytes"] > 0
    assert doc["verdict"] in ("go", "tight")


def test_max_ctx_fit_is_the_boundary() -> None:
    doc = check("gemma-2-27b", ["rtx-4090"], "Q4_K_M", n_ctx=8192)
    n = doc["max_ctx_fit"]
    assert n % 256 == 0
    at = check("gemma-2-27b", ["rtx-4090"], "Q4_K_M", n_ctx=n, n_gpu_layers=47)
    assert at["memory"]["devices"][0]["headroom_bytes"] >= 0
    if n < 8192:
        beyond = check("gemma-2-27b", ["rtx-4090"], "Q4_K_M", n_ctx=n + 256, n_gpu_layers=47)
        assert beyond["memory"]["devices"][0]["headroom_bytes"] < 0


GPUS = ["a4000", "rtx-3060-12gb", "rtx-4090", "t4", "l4", "a100-80gb-sxm", "h200-sxm", "rtx-4060ti-8gb"]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(CONTRACT_MODELS), quant=st.sampled_from(CONTRACT_QUANTS),
       gpu=st.sampled_from(GPUS), ctx=st.sampled_from([2048, 8192, 32768, 131072]))
def test_a_model_that_does_not_fit_never_gets_go(model: str, quant: str, gpu: str, ctx: int) -> None:
    doc = check(model, [gpu], quant, n_ctx=ctx)
    if doc["verdict"] in ("go", "tight"):
        assert all(d["headroom_bytes"] >= 0 for d in doc["memory"]["devices"])
        assert doc["settings"]["n_gpu_layers"] == doc["settings"]["n_layers_total"]
    if doc["verdict"] == "go":
        assert min(d["headroom_bytes"] for d in doc["memory"]["devices"]) >= 2**30


@pytest.mark.parametrize(("args", "code"), [
    (["--gpu", "h100-sxm", "--model", "9b"], 0),
    (["--gpu", "rtx-3060-12gb", "--model", "27b"], 3),
    (["--gpu", "t4", "--model", "31b", "--quant", "bf16", "-ngl", "61"], 4),
])
def test_exit_status_follows_the_verdict(args: list[str], code: int) -> None:
    proc = subprocess.run([*CLI, "check", *args, "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == {0: "go", 3: "offload", 4: "no-go"}[code]


def test_performance_block_is_present_and_sane() -> None:
    doc = check("9b", ["a4000"], "Q5_K_M")
    perf = doc["performance"]
    assert {"decode_tokens_per_s", "prefill_tokens_per_s", "ttft_s", "load_s", "bottleneck"} <= set(perf)
    # A4000: 448 GB/s; Gemma 2 9B Q5_K_M reads ~6.2 GiB per token -> at most ~70 tok/s at 100% bandwidth
    assert 20 < perf["decode_tokens_per_s"] < 70
    assert perf["prefill_tokens_per_s"] > perf["decode_tokens_per_s"]
    assert "bandwidth" in perf["bottleneck"]


def test_moe_and_dense_gemma_4_on_two_gpus_match_published_runs() -> None:
    """llama.cpp PR #19378 (benchmarks/data/multigpu_llamabench.csv; two RTX 4090, inferred from the
    thread): tg128 26B-A4B Q4_0 197.11 (layer) / 138.76 (tensor), 31B Q4_K_M 43.81 / 59.45 tokens/s."""
    moe = check("gemma-4-26B-A4B", ["rtx-4090", "rtx-4090"], "Q4_0")["performance"]
    dense = check("gemma-4-31B", ["rtx-4090", "rtx-4090"], "Q4_K_M")["performance"]
    for perf, layer, tensor in ((moe, 197.11, 138.76), (dense, 43.81, 59.45)):
        modes = perf["split_modes_decode_tokens_per_s"]
        assert abs(modes["layer"] / layer - 1) < 0.2
        assert abs(modes["tensor"] / tensor - 1) < 0.25
    assert moe["decode_tokens_per_s"] > 3 * dense["decode_tokens_per_s"]  # 8 of 128 experts read per token


def test_offloaded_layers_slow_decode_and_are_named() -> None:
    full = check("gemma-3-27b", ["rtx-4090"])["performance"]
    part = check("gemma-3-27b", ["rtx-3060-12gb"])
    assert part["verdict"] == "offload"
    assert part["performance"]["decode_tokens_per_s"] < full["decode_tokens_per_s"] / 3
    assert "CPU" in part["performance"]["bottleneck"]


def test_prompt_longer_than_context_keeps_the_memory_verdict() -> None:
    proc = subprocess.run([*CLI, "check", "--gpu", "a4000", "--model", "9b", "--ctx", "2048",
                           "--prompt-tokens", "4096", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "go" and doc["performance"] is None
    assert "longer than the context" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_example_machine_file_works() -> None:
    from pathlib import Path

    proc = subprocess.run([*CLI, "check", "--hardware", str(Path(__file__).parent.parent / "examples" /
                                                             "workstation.yaml"), "--model", "27b", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["memory"]["devices"]) == 2 and doc["memory"]["host"]["capacity_bytes"] == 128 * 2**30


def test_quantized_cache_adds_cuda_flash_attention_f16_copies() -> None:
    """ggml-cuda's FA prompt kernels convert a quantized K/V cache to f16 inside the node's allocation:
    Gemma 3 27B at 32K with q8_0: the largest layer's K and V at 32768 cells x 16 heads x 128 x 2 B."""
    from gemma_fit.memory.compute_buffer import fa_f16_copy_bytes
    from gemma_fit.memory.kv_cache import kv_cache_layout

    spec = resolve_model("gemma-3-27b").spec
    s = RunSettings(n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    assert fa_f16_copy_bytes(spec, s, kv_cache_layout(spec, s)) == 256 * 2**20
    assert fa_f16_copy_bytes(spec, RunSettings(n_ctx=32768), kv_cache_layout(spec, RunSettings(n_ctx=32768))) == 0
    cuda = check("gemma-3-27b", ["h100-sxm"], n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0")
    metal = check("gemma-3-27b", ["m3-ultra-96gb"], n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0")
    assert cuda["memory"]["devices"][0]["compute_bytes"] > metal["memory"]["devices"][0]["compute_bytes"]



# --- what was not checked, and the words of the verdict ------------------------------------------


def test_unknown_host_ram_is_said_and_listed_as_unchecked() -> None:
    doc = check("9b", ["a4000"], "Q5_K_M")
    assert doc["memory"]["host"]["capacity_bytes"] is None
    assert doc["unchecked"] == ["host_ram"]
    assert any(r.startswith("host RAM not checked: this plan needs ") and "--hardware FILE with ram_gb" in r
               for r in doc["reasons"])
    offload = check("gemma-3-27b", ["rtx-3060-12gb"])
    assert offload["verdict"] == "offload" and "not checked" in offload["reasons"][0]


def test_a_machine_file_with_ram_checks_host_ram(tmp_path: Path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text("name: box\ngpus: [rtx-3060-12gb]\nram_gb: 4\n", encoding="utf-8")
    hw = select_hardware([], path, ())
    doc = check_json(run_check(resolve_model("gemma-3-27b"), "Q4_K_M", RunSettings(), hw))
    assert doc["unchecked"] == [] and doc["memory"]["host"]["capacity_bytes"] == 4 * 2**30
    assert doc["verdict"] == "no-go"  # the layers left on the CPU need 6.4 GiB, more than 4
    assert any(r.startswith("host RAM: needs ") and "of 4.00 GiB (does not fit)" in r for r in doc["reasons"])
    assert not any("not checked" in r for r in doc["reasons"])


def test_a_host_side_no_machine_has_is_no_go_when_ram_is_unknown() -> None:
    """A GGUF header claiming ~10^16 bytes of token embeddings came back "offload" at 283 tok/s."""
    resolved = resolve_model("gemma-3-27b")
    plan = build_plan(resolved.spec, "Q4_K_M")
    huge = replace(plan, tensors=tuple(replace(t, shape=(t.shape[0], 10**13)) if t.name == "token_embd.weight"
                                       else t for t in plan.tensors))
    doc = check_json(run_check(resolved, "Q4_K_M", RunSettings(), select_hardware(["h100-sxm"], None, ()), plan=huge))
    assert doc["memory"]["host"]["total_bytes"] > MAX_HOST_RAM_BYTES
    assert doc["verdict"] == "no-go" and "more than any machine has" in doc["reasons"][0]
    assert doc["performance"] is None


def test_context_past_the_trained_one_is_explained() -> None:
    """Gemma 2 was trained at 8,192: llama-server allocates --ctx 32768 but caps each slot at 8,192."""
    doc = check("gemma-2-9b", ["a4000"], n_ctx=32768)
    assert doc["settings"]["n_ctx"] == 32768 and doc["max_ctx_fit"] == 8192
    assert doc["max_ctx_fit_limit"] == "n_ctx_train"
    assert any("past the model's trained context of 8,192 tokens" in r and "caps each slot at 8,192" in r
               and "--ctx 8192 gives the same usable context" in r for r in doc["reasons"])
    assert any("8,192 tokens, is the model's trained context: a cap" in r and "not a memory limit" in r
               for r in doc["reasons"])
    small = check("gemma-3-27b", ["rtx-4090"], n_ctx=131072)
    assert small["max_ctx_fit_limit"] == "memory" and small["max_ctx_fit"] < 131072
    assert not any("trained context" in r for r in small["reasons"])


def test_explicit_n_gpu_layers_is_reported_as_asked() -> None:
    zero = check("gemma-2-9b", ["a4000"], n_gpu_layers=0)
    assert zero["verdict"] == "offload"
    assert zero["reasons"][0].startswith("0 of 43 layers on the GPU(s) as asked (-ngl 0); 43 run on the CPU")
    assert "all 43 would fit on the GPU(s) (-ngl 43)" in zero["reasons"][0]
    assert "only" not in zero["reasons"][0]
    auto = check("gemma-3-27b", ["rtx-3060-12gb"])["settings"]["n_gpu_layers"]
    ten = check("gemma-3-27b", ["rtx-3060-12gb"], n_gpu_layers=10)
    assert ten["reasons"][0].startswith("10 of 63 layers on the GPU(s) as asked (-ngl 10)")
    assert re.search(rf"; {auto} would fit on the GPU\(s\) \(-ngl {auto}\)", ten["reasons"][0])
    too_many = check("gemma-3-27b", ["rtx-3060-12gb"], n_gpu_layers=63)
    assert too_many["verdict"] == "no-go" and f"at most {auto} fit (-ngl {auto})" in too_many["reasons"][0]


def test_gguf_command_runs_the_file_as_given(tmp_path: Path) -> None:
    folder = tmp_path / "my models"
    folder.mkdir()
    gguf = folder / "g 270m's.gguf"
    synth = subprocess.run([*CLI, "synth", str(gguf), "--model", "270m"], capture_output=True, text=True, timeout=300)
    assert synth.returncode == 0, synth.stderr
    for args in (["check", "--gguf", str(gguf)], ["inspect", str(gguf)]):
        proc = subprocess.run([*CLI, *args, "--gpu", "a4000", "--json"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        command = json.loads(proc.stdout)["llama_server_command"]
        assert shlex.split(command)[:3] == ["llama-server", "-m", str(gguf)]


def test_suggestion_is_printed_once(tmp_path: Path) -> None:
    for ram in (16, 61):
        path = tmp_path / f"ram{ram}.yaml"
        path.write_text(f"name: box\nram_gb: {ram}\n", encoding="utf-8")
        proc = subprocess.run([*CLI, "check", "--hardware", str(path), "--model", "31b", "--quant", "bf16",
                               "--ctx", "4096"], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "COLUMNS": "400"})
        assert proc.returncode == 4, proc.stderr
        lines = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("- ")]
        assert len(lines) == len(set(lines))
        assert proc.stdout.count("largest quant that fits entirely") == 1
        assert proc.stdout.count("fits entirely up to --ctx") + proc.stdout.count("largest context that fits") == 1


def test_sixteen_gpus_are_more_than_one_llama_cpp_process_runs() -> None:
    """GGML_SCHED_MAX_BACKENDS (16) counts the CPU backend too: 16 GPUs abort llama_context creation."""
    sixteen = check("9b", ["t4"] * 16)
    assert sixteen["verdict"] == "no-go" and "at most 15 GPUs" in sixteen["reasons"][0]
    assert sixteen["suggestion"] is None
    assert check("9b", ["t4"] * 15)["verdict"] == "go"


@given(st.lists(st.text(alphabet=st.sampled_from(list("ab -_./:=@%+,'\"$é\n*\t")), max_size=6), max_size=6))
def test_the_printed_command_is_quoted_as_shlex_quotes_it(args: list[str]) -> None:
    from gemma_fit.memory.fit import _shell_join

    assert _shell_join(args) == shlex.join(args)
