"""The speed model's rules: attention work over a prompt, several GPUs and their links, load time,
offloaded layers. Its calibration error is printed by benchmarks/calibrate_speed.py and asserted in
test_speed_calibration.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemma_fit import check
from gemma_fit.engines.llamacpp import run_check
from gemma_fit.hardware.catalog import load_gpus
from gemma_fit.hardware.select import select_hardware
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import check_json
from gemma_fit.speed.work import attended_cells, attention_flops


def perf(model: str, gpus: list[str], quant: str = "Q4_K_M", prompt: int = 512, hardware: Path | None = None,
         **kw: object) -> dict:
    hw = select_hardware(gpus, hardware, ())
    doc = check_json(run_check(resolve_model(model), quant, RunSettings(**kw), hw, prompt_tokens=prompt))
    assert doc["performance"] is not None, doc["speed_error"]
    return doc["performance"]


@settings(deadline=None)  # no wall-clock limit: a busy machine must not fail a test
@given(st.integers(1, 5000), st.sampled_from([1, 64, 512, 2048]), st.sampled_from([0, 512, 1024, 4096]))
def test_attended_cells_match_a_token_by_token_count(n_tokens: int, n_ubatch: int, window: int) -> None:
    expected = 0
    for start in range(0, n_tokens, n_ubatch):
        end = min(start + n_ubatch, n_tokens)
        n_kv = min(end, window + n_ubatch) if window else end
        expected += (end - start) * n_kv
    assert attended_cells(n_tokens, n_ubatch, window) == expected


def test_sliding_window_layers_stop_growing_past_their_window() -> None:
    spec = resolve_model("gemma-3-27b").spec
    swa = next(layer.index for layer in spec.layers if layer.is_swa)
    full = next(layer.index for layer in spec.layers if not layer.is_swa)
    short, long = attention_flops(spec, 1024, 512), attention_flops(spec, 32768, 512)
    assert short[swa] == short[full]  # within the 1024-token window both attend to everything
    assert long[full] > 10 * long[swa]  # 32k context: the global layer attends ~16x more cells


def test_long_prompts_prefill_slower_and_wait_longer() -> None:
    short = perf("gemma-3-27b", ["h100-sxm"], prompt=512, n_ctx=32768)
    long = perf("gemma-3-27b", ["h100-sxm"], prompt=32768, n_ctx=32768)
    assert long["prefill_tokens_per_s"] < 0.95 * short["prefill_tokens_per_s"]  # 10 of 62 layers attend globally
    assert long["ttft_s"] > 50 * short["ttft_s"]


def test_two_cards_of_one_kind_both_count_and_the_link_is_named() -> None:
    one = perf("gemma-3-27b", ["rtx-3090"], "Q4_K_M")
    two = perf("gemma-3-27b", ["rtx-3090", "rtx-3090"], "Q8_0")
    gpu_keys = [k for k in two["decode_time_by_device_s"] if k.startswith("rtx-3090")]
    assert len(gpu_keys) == 2
    assert two["interconnect"].startswith("PCIe")
    assert two["decode_time_by_device_s"]["links"] > 0
    assert set(two["split_modes_decode_tokens_per_s"]) == {"layer", "row", "tensor"}
    assert one["interconnect"] is None and one["split_modes_decode_tokens_per_s"] == {}


def test_sxm_modules_talk_over_nvlink_and_a_narrow_slot_is_seen(tmp_path: Path) -> None:
    sxm = perf("gemma-3-27b", ["h100-sxm", "h100-sxm"], "BF16")
    assert sxm["interconnect"].startswith("NVLink")
    machine = tmp_path / "m.yaml"
    machine.write_text("name: box\ngpus:\n  - rtx-3090\n  - gpu: rtx-3090\n    pcie_gen: 3\n    pcie_lanes: 4\n")
    narrow = perf("gemma-3-27b", [], "Q8_0", hardware=machine)
    assert narrow["interconnect"] == "PCIe 3.0 x4"


def test_warm_load_is_faster_and_needs_the_file_in_ram(tmp_path: Path) -> None:
    p = perf("gemma-3-27b", ["h100-sxm"], "BF16")
    assert p["load_warm_s"] < p["load_s"]
    machine = tmp_path / "m.yaml"
    machine.write_text("name: small\ngpus: [h100-sxm]\nram_gb: 16\n")
    assert perf("gemma-3-27b", [], "BF16", hardware=machine)["load_warm_s"] is None


def test_each_offloaded_layer_costs_what_the_report_says() -> None:
    full = perf("gemma-2-9b", ["rtx-4090"], "Q8_0", n_gpu_layers=99)
    part = perf("gemma-2-9b", ["rtx-4090"], "Q8_0", n_gpu_layers=32)  # 10 of 42 repeating layers on the CPU
    extra = 1 / part["decode_tokens_per_s"] - 1 / full["decode_tokens_per_s"]
    assert abs(extra - 10 * part["per_offloaded_layer_ms"] / 1e3) < 0.15 * extra


def test_a_gpu_without_bandwidth_keeps_the_memory_verdict(tmp_path: Path) -> None:
    machine = tmp_path / "m.yaml"
    machine.write_text(
        "name: custom\ngpus:\n  - id: mystery\n    name: Mystery 24G\n    vendor: nvidia\n    arch: ada\n"
        "    backend: cuda\n    memory_bytes: 25769803776\n    usable_memory_bytes: 25769803776\n"
        "    usable_note: assumed\n    unified_memory: false\n    memory_type: GDDR6\n    bf16_supported: true\n"
        "    ecc: false\n    form_factor: card\n    source: https://example.com/spec\n")
    hw = select_hardware([], machine, ())
    doc = check_json(run_check(resolve_model("9b"), "Q4_K_M", RunSettings(), hw))
    assert doc["verdict"] == "go" and doc["performance"] is None
    assert "no memory-bandwidth figure" in doc["speed_error"]


def test_backend_option_switches_overhead_and_calibration() -> None:
    cli = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]
    base = ["check", "--gpu", "rtx-4070", "--model", "9b", "--json"]
    cuda = subprocess.run([*cli, *base], capture_output=True, text=True, timeout=300)
    vulkan = subprocess.run([*cli, *base, "--backend", "vulkan"], capture_output=True, text=True, timeout=300)
    c, v = json.loads(cuda.stdout), json.loads(vulkan.stdout)
    assert c["memory"]["devices"][0]["overhead_bytes"] == 453 * 2**20
    assert v["memory"]["devices"][0]["overhead_bytes"] == 300 * 2**20
    assert any("vulkan" in n for n in v["performance"]["notes"])
    assert v["performance"]["decode_tokens_per_s"] != c["performance"]["decode_tokens_per_s"]
    bad = subprocess.run([*cli, "check", "--gpu", "m2-max-64gb", "--model", "9b", "--backend", "vulkan"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no such backend" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_the_speed_cache_answers_as_the_prediction_does(monkeypatch) -> None:  # noqa: ANN001
    """predict_performance answers a plan and machine from its cache wherever the context changes nothing it reads:
    a report with the cache equals one without, cell for cell, over offloaded, MoE, CPU and unified machines."""
    from gemma_fit.jobs.report import run_report
    from gemma_fit.speed import predict

    class NoCache(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: object, value: object) -> None:
            pass

    def cells() -> list[dict]:  # type: ignore[type-arg]  # every figure and the full check document
        doc = run_report(["gemma-3-4b", "gemma-3-27b", "gemma-4-26b-a4b"], ["Q4_K_M", "Q8_0"],
                         [["rtx-4090"], ["a4000"], ["rtx-3060-12gb", "rtx-3060-12gb"], ["m2-max-32gb"], ["cpu"]],
                         [4096, 32768, 131072, 0], RunSettings(), workers=1)
        return list(doc["cells"])

    predict._PERF.clear()
    cached = cells()
    assert 0 < len(predict._PERF) < sum(1 for c in cached if c["decode_tokens_per_s"])  # answers were shared
    monkeypatch.setattr(predict, "_PERF", NoCache())
    assert cells() == cached


def test_bf16_prompts_on_geforce_run_at_the_fp32_accumulate_rate() -> None:
    """cuBLAS accumulates BF16 GEMMs in FP32 (ggml_cuda_mul_mat_cublas), which GeForce cards run at half their
    FP16-accumulate rate; F16 weights keep it, and a data-centre card runs both at full rate."""
    from gemma_fit.speed.rates import matmul_tops

    known = load_gpus(())
    geforce, h100 = known["rtx-4090"], known["h100-sxm"]
    assert matmul_tops(geforce, False, "BF16") == geforce.fp16_tensor_tflops / 2
    assert matmul_tops(geforce, False, "F16") == geforce.fp16_tensor_tflops
    assert matmul_tops(h100, False, "BF16") == h100.fp16_tensor_tflops
    rates = {q: check("gemma-3-12b", "rtx-4090", quant=q).performance for q in ("BF16", "F16")}
    assert rates["BF16"] is not None and rates["F16"] is not None
    assert rates["BF16"].prefill_tokens_per_s < 0.7 * rates["F16"].prefill_tokens_per_s


def test_sycl_multiplies_a_batchs_experts_one_by_one_from_the_host() -> None:
    """ggml_sycl_mul_mat_id runs a MUL_MAT_ID of more than one token as one product per routed-to expert: each costs
    the fitted per-call figure on SYCL, nothing on CUDA, and a single token takes the fused kernel."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.calibration import expert_call_s
    from gemma_fit.speed.prefill import _prefill_rates, expert_loop_s
    from gemma_fit.speed.work import token_work

    spec = resolve_model("gemma-4-26B-A4B").spec
    plan = build_plan(spec, "Q4_K_M")
    per_layer = token_work(plan).expert_matrices
    assert [len(ms) for ms in per_layer] == [2] * spec.n_layer  # ffn_gate_up_exps and ffn_down_exps
    matrices = tuple(m for ms in per_layer for m in ms)
    b70 = hardware_of(["arc-pro-b70"], "sycl", (), MachineFlags()).gpus[0]
    cuda = load_gpus(())["rtx-4090"]
    assert expert_call_s(b70) > 0 and expert_call_s(cuda) > 0
    rates = _prefill_rates(b70, plan.ftype.default_type)
    touched = spec.n_expert * (1 - (1 - spec.n_expert_used / spec.n_expert) ** 512)
    assert expert_loop_s(rates, matrices, 512, spec) == len(matrices) * touched * expert_call_s(b70)
    assert expert_loop_s(rates, matrices, 1, spec) == 0
    assert expert_loop_s(_prefill_rates(cuda, plan.ftype.default_type), matrices, 512, spec) == 0  # MMQ


def test_cuda_multiplies_wide_bf16_experts_from_the_host_past_what_mmf_takes() -> None:
    """ggml_cuda_mul_mat_id: F16/BF16 experts go through MMF only up to 512 tokens (at most 1,024 rows) or 128 (wider),
    past that one cuBLAS/hipBLAS product per expert from the host; up to 8 tokens the matrix-vector kernels. Gemma 4
    26B-A4B's BF16 experts are 1,408 and 2,816 rows wide; on CDNA 3 MMF takes no BF16 at all."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.speed.prefill import loops_from_host
    from gemma_fit.speed.work import ExpertMatrix, token_work

    plan = build_plan(resolve_model("gemma-4-26B-A4B").spec, "BF16")
    matrices = {m for ms in token_work(plan).expert_matrices for m in ms}
    assert {m.rows for m in matrices} == {1408, 2816} and not any(m.quantized for m in matrices)
    wide = ExpertMatrix(2816, "BF16", False)
    narrow = ExpertMatrix(704, "BF16", False)
    assert [loops_from_host("rocm", "rdna3", wide, u) for u in (8, 128, 129, 512)] == [False, False, True, True]
    assert [loops_from_host("cuda", "ada", narrow, u) for u in (512, 513)] == [False, True]
    assert loops_from_host("rocm", "cdna3", narrow, 16) and not loops_from_host("rocm", "cdna3", narrow, 8)
    assert not loops_from_host("rocm", "rdna3", ExpertMatrix(2816, "Q4_K", True), 512)
    assert not loops_from_host("vulkan", "rdna3", wide, 512) and not loops_from_host("metal", "", wide, 512)
    assert loops_from_host("sycl", "xe2-hpg", ExpertMatrix(2816, "Q4_K", True), 2)


def test_vulkan_on_rdna4_multiplies_k_quants_at_the_fp16_rate() -> None:
    """ggml-vulkan builds its INT8 cooperative-matrix pipelines for RDNA 3 and 4, on RDNA 4 without Q4_1, Q5_1, Q4_K
    and Q5_K: those go through the FP16 matrices, half RDNA 4's INT8 rate. ROCm and the other types keep INT8."""
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.rates import matmul_tops

    vulkan = hardware_of(["radeon-ai-pro-r9700"], "vulkan", (), MachineFlags()).gpus[0]
    rocm = hardware_of(["radeon-ai-pro-r9700"], "rocm", (), MachineFlags()).gpus[0]
    assert matmul_tops(vulkan, True, "Q4_K") == vulkan.fp16_tensor_tflops
    assert matmul_tops(vulkan, True, "Q8_0") == vulkan.int8_tensor_tops > 1.9 * vulkan.fp16_tensor_tflops
    assert matmul_tops(rocm, True, "Q4_K") == rocm.int8_tensor_tops
    rdna3 = hardware_of(["rx-7900-xtx"], "vulkan", (), MachineFlags()).gpus[0]
    assert matmul_tops(rdna3, True, "Q4_K") == rdna3.int8_tensor_tops


def test_vulkan_multiplies_experts_at_the_fp16_rate_on_amd() -> None:
    """The INT8 pipelines serve MUL_MAT only: a mixture-of-experts layer's MUL_MAT_ID dequantizes to FP16 on RDNA 3 and
    4 whatever the type (matmul_id_subgroup_*), so an RX 9070 XT's Q4_0 experts run at half its INT8 rate, its dense
    Q4_0 products at the full rate; CUDA's MMQ multiplies both as INT8."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.prefill import _prefill_rates
    from gemma_fit.speed.rates import matmul_tops

    xt = hardware_of(["rx-9070-xt"], "vulkan", (), MachineFlags()).gpus[0]
    assert matmul_tops(xt, True, "Q4_0") == xt.int8_tensor_tops
    assert matmul_tops(xt, True, "Q4_0", experts=True) == xt.fp16_tensor_tflops
    assert xt.int8_tensor_tops == pytest.approx(2 * xt.fp16_tensor_tflops, rel=0.01)
    assert matmul_tops(xt, True, "Q2_K") == xt.fp16_tensor_tflops  # no INT8 pipeline for Q2_K
    cuda = load_gpus(())["rtx-4090"]
    assert matmul_tops(cuda, True, "Q4_0", experts=True) == cuda.int8_tensor_tops
    from gemma_fit.speed.calibration import expert_group, expert_prefill_efficiency, prefill_efficiency

    rates = _prefill_rates(xt, build_plan(resolve_model("gemma-4-26B-A4B").spec, "Q4_0").ftype.default_type)
    assert rates.matmul_flops_s == pytest.approx(xt.int8_tensor_tops * 1e12 * prefill_efficiency(xt, True)[0])
    # the two paths are fitted apart: each driver runs its FP16 and INT8 cooperative matrices its own way
    assert expert_group(xt, True) == "vulkan-amd-experts" and expert_group(cuda, True) is None
    assert rates.expert_flops_s == pytest.approx(xt.fp16_tensor_tflops * 1e12 * expert_prefill_efficiency(xt, True))


def test_vulkan_runs_its_scalar_shaders_where_it_has_no_cooperative_matrices() -> None:
    """ggml_vk_khr_cooperative_matrix_support: Intel only from Xe2 (the A770 "has performance regressions"), AMD from
    RDNA 3 (the first with WMMA), NVIDIA where tensor cores are. Elsewhere the prompt's products and attention run on
    the shader cores at their FP32 rate, in a calibration group of their own (attention's too: a scalar flash attention
    is not a coopmat one): an Arc A770's matrix units sit idle."""
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.calibration import attention_group, prefill_group
    from gemma_fit.speed.rates import attention_tflops, matmul_tops, vulkan_coopmat

    def vk(gpu: str) -> GPUSpec:
        return hardware_of([gpu], "vulkan", (), MachineFlags()).gpus[0]

    scalar = {g: vk(g) for g in ("arc-a770-16gb", "rx-6700-xt", "gtx-1070", "radeon-pro-vii")}
    for g in scalar.values():
        assert not vulkan_coopmat(g) and prefill_group(g).endswith("-scalar")
        assert attention_group(g) == f"vulkan-{g.vendor}-scalar"
        assert matmul_tops(g, True, "Q4_0") == matmul_tops(g, False, "F16") == attention_tflops(g) == g.fp32_tflops
    assert scalar["arc-a770-16gb"].int8_tensor_tops  # it has XMX units; llama.cpp does not use them through Vulkan
    for gpu in ("arc-b580", "rx-7900-xtx", "ryzen-ai-max-395-128gb", "rtx-4090"):
        g = vk(gpu)
        assert vulkan_coopmat(g) and prefill_group(g) == attention_group(g) == f"vulkan-{g.vendor}"
        assert matmul_tops(g, True, "Q4_0") in (g.int8_tensor_tops, g.fp16_tensor_tflops)
    a770_sycl = hardware_of(["arc-a770-16gb"], "sycl", (), MachineFlags()).gpus[0]
    assert matmul_tops(a770_sycl, True, "Q4_0") == a770_sycl.int8_tensor_tops  # SYCL reaches the XMX units
    arc = {b: check("gemma-3-12b", "arc-a770-16gb", backend=b).performance for b in ("vulkan", "sycl")}
    assert arc["vulkan"] is not None and "--backend sycl uses them" in arc["vulkan"].bottleneck
    assert arc["sycl"] is not None and "--backend sycl" not in arc["sycl"].bottleneck
    assert arc["sycl"].prefill_tokens_per_s > 1.5 * arc["vulkan"].prefill_tokens_per_s  # as the advice says
    moe = check("gemma-4-26B-A4B", "arc-a770-16gb", quant="Q3_K_M", backend="vulkan").performance
    assert moe is not None and "--backend sycl" not in moe.bottleneck  # SYCL's host loop over experts: no gain
    said = {g: check("gemma-3-12b", g, backend="vulkan").performance for g in ("rx-6900-xt", "rx-7900-xtx")}
    assert said["rx-6900-xt"] is not None and "shader cores" in said["rx-6900-xt"].bottleneck
    assert said["rx-7900-xtx"] is not None and "tensor throughput" in said["rx-7900-xtx"].bottleneck


def test_attention_without_runs_at_depth_takes_the_matrix_unit_pool() -> None:
    """A backend and vendor with no published runs at depth (NVIDIA through Vulkan) take the attention share pooled
    over the backends whose flash attention runs on matrix units, not the matrix products' much larger share; Metal
    (measured against its shader rate) and Vulkan's scalar shaders keep the matrix products' share."""
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.calibration import ATTENTION_POOL, attention_efficiency, prefill_efficiency, published_groups

    pool = published_groups()["attention"][ATTENTION_POOL]
    assert pool["machines"] >= 2 and 0 < pool["efficiency"] < 0.5
    nvidia_vk = hardware_of(["rtx-4090"], "vulkan", (), MachineFlags()).gpus[0]
    assert attention_efficiency(nvidia_vk, True) == pool["efficiency"]
    assert attention_efficiency(nvidia_vk, True) < prefill_efficiency(nvidia_vk, True)[0]
    for gpu, backend in (("m4-max-64gb", "metal"), ("arc-a770-16gb", "vulkan")):
        g = hardware_of([gpu], backend, (), MachineFlags()).gpus[0]
        assert attention_efficiency(g, True) == prefill_efficiency(g, True)[0]


def test_strix_halo_rates_follow_the_rdna3_convention() -> None:
    """WMMA: 512 FP16 FLOPs (or INT8 ops) per CU per clock on RDNA 3 and 3.5, as the RX 7900 XTX entry counts them."""
    gpus = load_gpus(())
    xtx, halo = gpus["rx-7900-xtx"], gpus["ryzen-ai-max-395-128gb"]
    per_cu_clock = {g.id: g.fp16_tensor_tflops * 1e6 / (cus * g.boost_clock_mhz) for g, cus in ((xtx, 96), (halo, 40))}
    assert round(per_cu_clock["rx-7900-xtx"]) == round(per_cu_clock["ryzen-ai-max-395-128gb"]) == 512
    assert halo.int8_tensor_tops == halo.fp16_tensor_tflops


def test_sycl_on_arc_a_series_decodes_at_its_documented_rate() -> None:
    """llama.cpp's SYCL page gives the A770 55 tok/s on llama-2-7b Q4_0: the A-series' SYCL decode comes from that row
    (not from other backends' median, which had it twice Vulkan's), and Xe2 cards keep the B70's published figure."""
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.calibration import decode_model

    a770 = hardware_of(["arc-a770-16gb"], "sycl", (), MachineFlags()).gpus[0]
    assert "sycl-xe-hpg" in decode_model(a770).source
    b580 = hardware_of(["arc-b580"], "sycl", (), MachineFlags()).gpus[0]
    assert "sycl-xe2-hpg" in decode_model(b580).source
    rates = {b: check("gemma-3-12b", "arc-a770-16gb", backend=b).performance for b in ("sycl", "vulkan")}
    assert rates["sycl"] is not None and rates["vulkan"] is not None
    assert 0.8 < rates["sycl"].decode_tokens_per_s / rates["vulkan"].decode_tokens_per_s < 1.3


def test_f16_weights_through_vulkan_take_the_quantized_pipelines_figure() -> None:
    """ggml-vulkan multiplies F16 weights with the FP16 cooperative-matrix pipelines its quantized types reach once
    dequantized, so F16 prompts take the quantized group; BF16 keeps `vulkan-fp16` (its scalar fallback where the driver
    has no BF16 matrices, which Strix Halo's BF16 runs measured). CUDA's F16 and BF16 GEMMs keep their own group."""
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.speed.calibration import prefill_group, quantized_group

    xtx = hardware_of(["rx-7900-xtx"], "vulkan", (), MachineFlags()).gpus[0]
    assert quantized_group(xtx, "F16") and not quantized_group(xtx, "BF16") and quantized_group(xtx, "Q4_K")
    cuda = load_gpus(())["rtx-4090"]
    assert prefill_group(cuda, quantized_group(cuda, "F16")) == "cuda-fp16"
    prefill = {}
    for q in ("F16", "BF16", "Q4_K_M"):
        perf = check("gemma-3-4b", "rx-7900-xtx", quant=q, backend="vulkan").performance
        assert perf is not None
        prefill[q] = perf.prefill_tokens_per_s
    f16, bf16, q4 = prefill["F16"], prefill["BF16"], prefill["Q4_K_M"]
    assert f16 > 2 * bf16 and 0.7 < f16 / q4 < 1.4


def test_gp100_and_volta_multiply_quantized_prompts_through_cublas_and_gp100_attends_in_fp16() -> None:
    """ggml-cuda: below compute capability 6.1 (no DP4A) only experts take MMQ, and Volta leaves MMQ for cuBLAS past 64
    columns, so a P100's and a V100's dense quantized weights take the cuBLAS share; GP100's flash-attention tile kernel
    runs FP16 at twice the FP32 rate (fast_fp16_available), which a P40 (6.1) does not."""
    from gemma_fit.speed.calibration import prefill_group
    from gemma_fit.speed.rates import attention_tflops

    known = load_gpus(())
    p100, p40, v100 = known["p100-pcie-16gb"], known["p40"], known["v100-pcie-16gb"]
    assert prefill_group(p100, quantized=True) == prefill_group(v100, quantized=True) == "cuda-cublas"
    assert prefill_group(p100, quantized=False) == "cuda-fp16"
    assert prefill_group(p40, quantized=True) == "cuda-pro"
    assert attention_tflops(p100) == pytest.approx(2 * (p100.fp32_tflops or 0))
    assert attention_tflops(p40) == p40.fp32_tflops


def test_an_ultra_keeps_the_llama_bench_kernel_cost_unless_an_ultra_was_fitted() -> None:
    """An M1 Ultra (two dies) does not take the per-kernel cost fitted on an M1 and an M1 Max alone
    (calibration.fused_dies); an M2 Ultra takes the M2's, whose fit had an M2 Ultra among its machines."""
    from gemma_fit.speed.calibration import calibration, fused_dies, node_cost, published_groups

    known = load_gpus(())
    m1_ultra, m1_max, m2_ultra = known["m1-ultra-64gb"], known["m1-max-64gb"], known["m2-ultra-192gb"]
    assert fused_dies(m1_ultra) and not fused_dies(m1_max)
    fit = calibration()["decode"]["fits"]["metal"]
    table = published_groups()["node_cost"]
    assert "ultra" not in table["metal@apple-m1"] and table["metal@apple-m2"]["ultra"] is True
    assert node_cost(m1_ultra, fit) == float(fit["seconds_per_node"])
    assert node_cost(m1_max, fit) == float(table["metal@apple-m1"]["seconds_per_node"])
    assert node_cost(m2_ultra, fit) == float(table["metal@apple-m2"]["seconds_per_node"])


def test_a_bf16_mixture_of_experts_prompt_on_cuda_says_its_experts_loop_from_the_host() -> None:
    """check: Gemma 4 26B-A4B in BF16 on a CUDA card multiplies its experts one GEMM per expert at llama-server's
    512-token ubatch (its expert matrices are wider than 1,024 rows), which the bottleneck line says; Q8_0 takes MMQ."""
    bf16, q8 = (check("gemma-4-26B-A4B", "rtx-pro-6000", quant=q).performance for q in ("BF16", "Q8_0"))
    assert bf16 is not None and q8 is not None
    assert "one GEMM per expert from the host" in bf16.bottleneck
    assert "one GEMM per expert" not in q8.bottleneck
    assert bf16.prefill_tokens_per_s < 0.5 * q8.prefill_tokens_per_s


def test_an_m1_max_decodes_k_quants_at_its_arithmetic_rate_not_its_read() -> None:
    """Metal's matrix-vector kernels unpack every weight in FP32: on an M1 Max (26 FP32 operations per byte of
    bandwidth) a Q4_K_M token is bound by that arithmetic, so Gemma 4 12B decodes barely faster than at Q8_0 with 41%
    fewer bytes (published: 28.9 and 25.2 tok/s, benchmarks/data/backend_published_runs.csv); an M5 Max keeps the read
    (no figure fitted for its chip) and gains about what the bytes say."""
    from gemma_fit.speed.rates import arithmetic_decode
    from gemma_fit.speed.vector import decode_flops_per_weight

    known = load_gpus(())
    assert decode_flops_per_weight(known["m1-max-64gb"]) > 0 and decode_flops_per_weight(known["m5-max-128gb"]) == 0
    assert arithmetic_decode(known["p100-pcie-16gb"]) and not arithmetic_decode(known["p40"])
    rates = {}
    for gpu in ("m1-max-64gb", "m5-max-128gb"):
        q4, q8 = (check("gemma-4-12b", gpu, quant=q).performance for q in ("Q4_K_M", "Q8_0"))
        assert q4 is not None and q8 is not None
        rates[gpu] = q4.decode_tokens_per_s / q8.decode_tokens_per_s
        assert ("arithmetic, not its memory" in q4.bottleneck) == (gpu == "m1-max-64gb")
    assert rates["m1-max-64gb"] < 1.3 < rates["m5-max-128gb"]


def test_chips_without_an_int8_dot_product_multiply_prompts_at_their_shader_rate() -> None:
    """ggml_cuda_dp4a: gfx906 (MI50) has v_dot4; Vega 10 and RDNA 1 emulate it in six instructions; Maxwell has no DP4A
    and sends a prompt's quantized weights to cuBLAS as GP100 does, and decodes in its arithmetic group."""
    from gemma_fit.speed.calibration import decode_group, prefill_group
    from gemma_fit.speed.rates import dot4_factor, matmul_tops

    known = load_gpus(())
    mi50, vega, navi10, m40 = known["mi50-16gb"], known["rx-vega-64"], known["rx-5700-xt"], known["m40-24gb"]
    assert dot4_factor(mi50) == 4 and dot4_factor(vega) == dot4_factor(navi10) == pytest.approx(4 / 6)
    assert matmul_tops(navi10, quantized=True) == pytest.approx(4 / 6 * (navi10.fp32_tflops or 0))
    assert matmul_tops(m40, quantized=True) == m40.fp32_tflops
    assert prefill_group(m40, quantized=True) == "cuda-cublas" and decode_group(m40) == "cuda-pascal-sm60"
