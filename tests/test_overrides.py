"""Tensor overrides (-ot, --cpu-moe, --n-cpu-moe), the margin a plan keeps, the expert plan -ngl auto
chooses for a mixture-of-experts model, and the ranked advice, on worked examples."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.hardware.snapshot import known_hardware
from gemma_fit.jobs.check import check, margin_bytes
from gemma_fit.memory.estimate import estimate_memory
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES, decide
from gemma_fit.memory.overrides import EXPERTS, moe_overrides, override_device, parse_override
from gemma_fit.memory.placement import CPU
from gemma_fit.memory.search import auto_gpu_layers, experts_to_cpu
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model
from gemma_fit.speed.work import device_work

MOE = resolve_model("gemma-4-26B-A4B").spec
GIB = 1024**3


def _gpu(name: str) -> tuple:
    gpu = known_hardware().gpu(name)
    assert gpu is not None
    return (gpu,)


def test_ot_is_split_on_commas_at_the_first_equals() -> None:
    rules = parse_override(r"blk\.1\.ffn_up=CPU,token_embd=CUDA0", 1)
    assert [(r.pattern, r.device) for r in rules] == [(r"blk\.1\.ffn_up", CPU), ("token_embd", 0)]
    with pytest.raises(BadInput, match="unknown buffer type 'b=CPU'"):  # split at the first '=', as llama.cpp
        parse_override("a=b=CPU", 1)


def test_ot_refuses_what_llama_cpp_refuses() -> None:
    with pytest.raises(BadInput, match="PATTERN=BUFFER"):
        parse_override("blk.0", 1)
    with pytest.raises(BadInput, match="unknown buffer type"):
        parse_override("blk=GPU", 1)
    with pytest.raises(BadInput, match="not a device of this hardware"):
        parse_override("blk=CUDA1", 1)
    with pytest.raises(BadInput, match="std::regex"):
        parse_override("blk(=CPU", 1)


def test_matching_is_an_unanchored_search_first_match_wins() -> None:
    rules = parse_override(r"ffn_up_exps=CPU,blk\.3\.=CUDA0", 1)
    assert override_device(rules, "blk.3.ffn_up_exps.weight") == CPU  # the first rule matches first
    assert override_device(rules, "blk.3.attn_q.weight") == 0
    assert override_device(rules, "blk.4.attn_q.weight") is None


def test_n_cpu_moe_moves_the_first_layers_experts_only() -> None:
    rules = moe_overrides(False, 2, MOE.n_layer)
    assert override_device(rules, "blk.1.ffn_gate_up_exps.weight") == CPU
    assert override_device(rules, "blk.2.ffn_gate_up_exps.weight") is None
    assert override_device(rules, "blk.0.ffn_gate_inp.weight") is None  # the router stays
    assert override_device(rules, "blk.0.ffn_up_shexp.weight") is None  # shared experts stay
    assert override_device(moe_overrides(True, 0, MOE.n_layer), "blk.29.ffn_down_exps.weight") == CPU
    assert len(moe_overrides(False, 99, MOE.n_layer)) == MOE.n_layer  # past the last layer matches nothing
    assert EXPERTS.startswith(r"\.ffn_")


def test_cpu_moe_keeps_every_expert_byte_on_the_host() -> None:
    plan = build_plan(MOE, "Q4_K_M")
    gpus = _gpu("rtx-4060-ti-16gb")
    n_all = MOE.n_layer + 1
    plain = estimate_memory(plan, RunSettings(), gpus, n_all, None)
    moved = estimate_memory(plan, RunSettings(cpu_moe=True), gpus, n_all, None)
    experts = sum(t.n_bytes for t in plan.tensors if "_exps" in t.name)
    assert plain.devices[0].weights_bytes - moved.devices[0].weights_bytes == experts
    assert moved.devices[0].kv_cache_bytes == plain.devices[0].kv_cache_bytes  # KV stays with the layers


def test_experts_on_the_cpu_are_read_at_the_routed_share() -> None:
    plan = build_plan(MOE, "Q4_K_M")
    est = estimate_memory(plan, RunSettings(cpu_moe=True), _gpu("rtx-4060-ti-16gb"), MOE.n_layer + 1, None)
    work = device_work(plan, est, 1, 512)
    experts = sum(t.n_bytes for t in plan.tensors if "_exps" in t.name)
    assert work.work[CPU].read_bytes == pytest.approx(experts * MOE.n_expert_used / MOE.n_expert)


def test_auto_layers_keep_the_margin_when_they_move_layers() -> None:
    model = resolve_model("gemma-3-27b").spec
    plan = build_plan(model, "Q4_K_M")
    s = RunSettings(n_ctx=131072)
    gpus = _gpu("rtx-3090")
    ngl = auto_gpu_layers(plan, s, gpus, None, SAFETY_MARGIN_BYTES)
    assert ngl < model.n_layer + 1
    room = lambda n: estimate_memory(plan, s, gpus, n, None).devices[0].headroom_bytes  # noqa: E731
    assert room(ngl) >= SAFETY_MARGIN_BYTES > room(ngl + 1)


def test_auto_on_a_moe_model_moves_experts_and_keeps_the_margin() -> None:
    plan = build_plan(MOE, "Q4_K_M")
    gpus = _gpu("rtx-4060")
    n_cpu = experts_to_cpu(plan, RunSettings(), gpus, None, SAFETY_MARGIN_BYTES)
    assert n_cpu is not None and 0 < n_cpu < MOE.n_layer
    room = lambda n: estimate_memory(plan, RunSettings(n_cpu_moe=n), gpus, MOE.n_layer + 1,  # noqa: E731
                                     None).devices[0].headroom_bytes
    assert room(n_cpu) >= SAFETY_MARGIN_BYTES > room(n_cpu - 1)
    v = decide(plan, RunSettings(), gpus, None)
    assert (v.verdict, v.n_gpu_layers, v.auto_n_cpu_moe) == ("offload", MOE.n_layer + 1, n_cpu)
    assert f"--n-cpu-moe {n_cpu}" in v.server_command


def test_an_explicit_plan_under_the_margin_is_warned() -> None:
    plan = build_plan(resolve_model("gemma-3-27b").spec, "Q4_K_M")
    s = RunSettings(n_ctx=131072)
    gpus = _gpu("rtx-3090")
    ngl = auto_gpu_layers(plan, s, gpus, None, 0)  # the most that fit with nothing to spare
    v = decide(plan, replace(s, n_gpu_layers=ngl), gpus, None)
    assert any("under the 1.00 GiB margin" in r for r in v.reasons)
    assert not any("margin" in r for r in decide(plan, s, gpus, None).reasons[:2])


def test_margin_flag_bounds() -> None:
    assert margin_bytes(None) == SAFETY_MARGIN_BYTES
    assert margin_bytes(2) == 2 * GIB
    with pytest.raises(BadInput):
        margin_bytes(-1)


def test_advice_for_27b_at_128k_on_a_3090_starts_with_the_q8_0_cache() -> None:
    r = check("gemma-3-27b", "rtx-3090", settings=RunSettings(n_ctx=131072))
    assert r.verdict == "offload"
    first = r.detail.advice[0]
    assert (first.flags, first.verdict) == ("-ctk q8_0 -ctv q8_0", "go")
    assert "--cache-type-k q8_0" in first.command
    assert all(a.verdict != "no-go" for a in r.detail.advice)


def test_no_advice_when_it_fits() -> None:
    assert check("gemma-3-4b", "rtx-4090").detail.advice == ()


def test_llamacpp_fit_makes_no_change_when_the_trained_context_fits() -> None:
    from gemma_fit.memory.llamacpp_fit import llamacpp_fit

    model = resolve_model("gemma-3-12b").spec
    fit = llamacpp_fit(build_plan(model, "Q4_K_M"), RunSettings(), _gpu("h100-sxm"), None)
    assert fit is not None
    assert (fit.n_ctx, fit.n_gpu_layers, fit.n_cpu_moe) == (model.n_ctx_train, model.n_layer + 1, 0)


def test_llamacpp_fit_shrinks_the_context_by_interpolation_on_one_gpu() -> None:
    from gemma_fit.memory.llamacpp_fit import FIT_MIN_CTX, FIT_TARGET_BYTES, llamacpp_fit

    model = resolve_model("gemma-3-27b").spec
    plan = build_plan(model, "Q4_K_M")
    gpus = _gpu("rtx-3090")
    fit = llamacpp_fit(plan, RunSettings(), gpus, None)
    assert fit is not None and fit.n_gpu_layers == model.n_layer + 1
    assert FIT_MIN_CTX < fit.n_ctx < model.n_ctx_train and fit.n_ctx % 256 == 0
    # memory is near-linear in the context: the interpolated context lands within 256 tokens' worth of KV
    # of the target (llama.cpp does not measure again)
    room = estimate_memory(plan, RunSettings(n_ctx=fit.n_ctx), gpus, model.n_layer + 1, None).devices[0].headroom_bytes
    assert abs(room - FIT_TARGET_BYTES) < 64 * 1024**2


def test_llamacpp_fit_moves_experts_on_a_moe_model() -> None:
    from gemma_fit.memory.llamacpp_fit import FIT_MIN_CTX, llamacpp_fit

    fit = llamacpp_fit(build_plan(MOE, "Q4_K_M"), RunSettings(), _gpu("rtx-4060"), None)
    assert fit is not None
    assert fit.n_ctx == FIT_MIN_CTX and fit.n_gpu_layers == MOE.n_layer + 1 and 0 < fit.n_cpu_moe < MOE.n_layer


@pytest.mark.parametrize("pattern", ["(.*)*x", "((.*)*)*z", "(a|a)*b", "(a+)+", ".*.*.*.*.*.*x"])
def test_patterns_that_backtrack_exponentially_elsewhere_are_answered(pattern: str) -> None:
    """std::regex takes these (and backtracks on them); here they are matched by a set simulation over every
    tensor name of a model, which ends whatever the pattern."""
    rules = parse_override(f"{pattern}=CPU", 1)
    names = [t.name for t in build_plan(MOE, "Q4_K_M").tensors]
    assert {override_device(rules, n) for n in names} <= {CPU, None}


@pytest.mark.parametrize("pattern", ["(x)?(?(1)|(.+)+#)", "(?P<n>blk)", "(?i)blk", r"blk\Z", "blk("])
def test_patterns_std_regex_refuses_are_bad_input(pattern: str) -> None:
    """Python's conditional groups, named groups, inline flags and anchors are not ECMAScript."""
    with pytest.raises(BadInput, match="std::regex") as err:
        parse_override(f"{pattern}=CPU", 1)
    assert "\n" not in str(err.value)


def test_back_references_are_matched_in_bounded_steps() -> None:
    """A back-reference makes matching exponential on a backtracking engine: the step budget ends it with one
    line, or it answers."""
    names = [t.name for t in build_plan(MOE, "Q4_K_M").tensors]
    rules = parse_override(r"(.*)(.*)(.*)\1\2\3x=CPU", 1)
    try:
        devices = {override_device(rules, n) for n in names}
    except BadInput as err:
        assert "too costly" in str(err) and "\n" not in str(err)
    else:
        assert devices <= {CPU, None}


@pytest.mark.parametrize("pattern", [r"blk\..*\.ffn_.*_exps\.", EXPERTS, r"blk\.(2[0-9]|30)\.ffn_.*_exps",
                                     r"blk\.\d+\.ffn_(up|down)_exps", r"blk\.[0-9]{2}\."])
def test_the_usual_patterns_are_taken(pattern: str) -> None:
    assert parse_override(f"{pattern}=CPU", 1)[0].pattern == pattern
