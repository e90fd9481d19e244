"""Many requests at once, traffic, clusters (llama.cpp RPC, vLLM on Ray) and the commands gemma-fit prints for them."""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.api import RunSettings, Traffic, check, to_json
from gemma_fit.base.errors import BadInput
from gemma_fit.engines.base import CheckRequest, Workload
from gemma_fit.engines.cluster import rpc_plan
from gemma_fit.engines.cluster_ray import accepted_layouts, pp_partition, ray_plan
from gemma_fit.engines.vllm import ENGINE as VLLM
from gemma_fit.hardware.cluster import IDEAL, Cluster, Node
from gemma_fit.hardware.cluster_file import load_cluster
from gemma_fit.hardware.select import select_hardware
from gemma_fit.hardware.spec import Hardware
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import cluster_device_json
from gemma_fit.speed.batch import Pipeline, StageWork
from gemma_fit.speed.traffic import HEADROOM, LoadPoint, closed_loop, open_loop

FLAGS = Path(__file__).parent / "data" / "engine_flags"


def _flags(name: str) -> set[str]:
    lines = (FLAGS / name).read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def _stage(**kw: float) -> StageWork:
    base = dict(name="g", shared_bytes=10e9, expert_bytes=0.0, expert_share=0.0, kv_bytes_per_seq=50e6,
                flops_per_token=20e9, bytes_s=1e12, flops_s=200e12, fixed_s=1e-3)
    base.update(kw)
    return StageWork(**base)  # type: ignore[arg-type]


def test_batched_decode_is_memory_bound_then_compute_bound() -> None:
    pipe = Pipeline((_stage(),))
    agg = [pipe.aggregate_tokens_per_s(b) for b in (1, 2, 4, 8, 16, 64, 256, 1024)]
    assert all(b > a for a, b in zip(agg, agg[1:], strict=False))  # more sequences, more tokens together
    per_user = [1 / pipe.step_s(b) for b in (1, 16, 256)]
    assert per_user[0] > per_user[1] > per_user[2]
    assert pipe.bound(1) == "memory" and pipe.bound(1024) == "compute"
    # far past the ridge the throughput approaches the matrix rate / FLOPs per token, less the KV reads
    assert agg[-1] < 200e12 / 20e9


def test_experts_touched_grow_with_the_batch() -> None:
    moe = Pipeline((_stage(shared_bytes=2e9, expert_bytes=16e9, expert_share=8 / 128),))
    one, many = moe.step_s(1), moe.step_s(64)
    assert many > one * 3  # 64 tokens route to most of the 128 experts: most expert bytes are read


def test_pipeline_parallel_overlaps_micro_batches() -> None:
    half = _stage(shared_bytes=5e9, flops_per_token=10e9, kv_bytes_per_seq=25e6)
    serial, piped = Pipeline((half, half)), Pipeline((half, half), pp=2)
    assert piped.step_s(1) == pytest.approx(serial.step_s(1))  # one sequence still crosses both stages
    assert piped.aggregate_tokens_per_s(64) > serial.aggregate_tokens_per_s(64)


def test_llamacpp_further_sequences_cost_a_share_of_the_weight_pass() -> None:
    # llama.cpp's kernels: each sequence past the first adds the larger of its FLOPs at the matrix rate and `reread`
    # of one token's weight pass (10 GB at 1 TB/s: 10 ms; 0.07 of it is 0.7 ms, more than 20 GFLOP at 200 TFLOP/s)
    w = _stage(overlap=False, reread=0.07, kv_bytes_per_seq=0.0)
    pipe = Pipeline((w,))
    assert pipe.step_s(2) - pipe.step_s(1) == pytest.approx(0.07 * 10e-3)
    assert pipe.step_s(9) - pipe.step_s(1) == pytest.approx(8 * 0.07 * 10e-3)
    fast_reads = Pipeline((replace(w, flops_s=10e12),))  # now the FLOPs (2 ms) cost more than the re-read
    assert fast_reads.step_s(2) - fast_reads.step_s(1) == pytest.approx(20e9 / 10e12)


@given(st.floats(0.0, 2.0), st.floats(1e9, 1e11), st.floats(1e11, 1e15), st.floats(0.0, 1e9), st.floats(0.0, 0.2))
def test_llamacpp_aggregate_never_falls_as_sequences_are_added(reread: float, flops: float, flops_s: float,
                                                               kv: float, share: float) -> None:
    w = _stage(overlap=False, reread=reread, flops_per_token=flops, flops_s=flops_s, kv_bytes_per_seq=kv,
               expert_bytes=20e9 if share else 0.0, expert_share=share)
    pipe = Pipeline((w,))
    agg = [pipe.aggregate_tokens_per_s(b) for b in (1, 2, 3, 8, 9, 32, 256)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(agg, agg[1:], strict=False))


def test_metal_batches_past_eight_run_whole_tiles_of_the_matrix_kernel() -> None:
    # ggml-metal: up to 8 columns the matrix-vector kernels (further sequences cost `reread` of a weight pass), past 8
    # the tiled mul_mm, 32 columns a tile, each tile its whole width's FLOPs at tile_flops_s (20 GFLOP x 32 at 10
    # TFLOP/s: 64 ms, more than the 10 ms weight read)
    w = _stage(overlap=False, reread=0.2, kv_bytes_per_seq=0.0, fixed_s=0.0, tile_from=8, tile=32, tile_flops_s=10e12)
    pipe = Pipeline((w,))
    assert pipe.step_s(8) - pipe.step_s(1) == pytest.approx(7 * 0.2 * 10e-3)
    assert pipe.step_s(9) == pipe.step_s(16) == pipe.step_s(32) == pytest.approx(32 * 20e9 / 10e12)
    assert pipe.step_s(33) == pytest.approx(2 * pipe.step_s(32))  # a second tile
    assert pipe.aggregate_tokens_per_s(16) < pipe.aggregate_tokens_per_s(8)  # half a tile wasted: as measured
    assert pipe.bound(16) == "compute"


def test_an_m2_ultra_serves_eight_sixteen_and_thirty_two_as_its_published_runs_do() -> None:
    """llama.cpp's benches/mac-m2-ultra: Gemma 3 4B QAT at 512 + 32 tokens, 441.8 tok/s at 8 sequences, 424.1 at 16,
    788.2 at 32 (benchmarks/data/serving_runs.csv): 16 half-fill Metal's 32-column tiles, 32 fill them; 8 take two
    passes of mul_mv_ext (speed.serve_llamacpp.metal_columns_per_pass), which on this machine cost less than on an
    M1 Max, so 16 come out at most a fifth faster than 8 rather than in the published order (each pass at least the
    M2's matrix-vector arithmetic, vector.vector_pass_s: 414 and 480 tok/s)."""
    from gemma_fit.engines.llamacpp import run_check
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.memory.settings import RunSettings
    from gemma_fit.model.catalog import resolve_model
    from gemma_fit.speed.serve_llamacpp import llamacpp_pipeline

    hw = replace(hardware_of(["m2-ultra-192gb"], None, ()), speed_calibration=None)
    s = RunSettings(n_ctx=32 * 544, n_parallel=32, kv_unified=True, n_batch=2048, n_ubatch=2048, flash_attn="on")
    c = run_check(resolve_model("gemma-3-4b", []), "QAT_Q4_0", s, hw, prompt_tokens=512)
    pipe = llamacpp_pipeline(c.detail.plan, c.detail.estimate, hw, 528)
    agg = {n: pipe.aggregate_tokens_per_s(n) for n in (8, 16, 32)}
    assert agg[8] < agg[16] < 1.2 * agg[8] and agg[32] > 1.7 * agg[16]
    for n, published in ((8, 441.8), (16, 424.1), (32, 788.2)):
        assert abs(agg[n] / published - 1) < 0.25


def test_only_metal_stages_switch_to_the_tiled_kernel() -> None:
    """The tile rule is ggml-metal's: a CUDA card's batched step keeps the shared share and no tile, an M2 32-column
    tiles, an M5 128 (its tensor API)."""
    from gemma_fit.engines.llamacpp import run_check
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.memory.settings import RunSettings
    from gemma_fit.model.catalog import resolve_model
    from gemma_fit.speed.serve_llamacpp import batched_terms, llamacpp_pipeline

    s = RunSettings(n_ctx=8192, n_parallel=16, kv_unified=True, n_batch=2048, n_ubatch=512, flash_attn="on")
    tiles = {}
    for gpu in ("rtx-4090", "m2-ultra-192gb", "m5-max-128gb"):
        hw = replace(hardware_of([gpu], None, ()), speed_calibration=None)
        c = run_check(resolve_model("gemma-3-4b", []), "Q4_0", s, hw, prompt_tokens=256)
        stage = llamacpp_pipeline(c.detail.plan, c.detail.estimate, hw, 256).stages[0]
        tiles[gpu] = (stage.tile_from, stage.tile, stage.reread)
    shared = batched_terms()["weight_pass_share_per_sequence"]
    metal = batched_terms("metal")["weight_pass_share_per_sequence"]
    assert tiles == {"rtx-4090": (0, 0, shared), "m2-ultra-192gb": (8, 32, metal), "m5-max-128gb": (8, 128, metal)}


def test_closed_loop_with_prefill_is_slower_than_decode_alone() -> None:
    pipe = Pipeline((_stage(),))
    c = closed_loop(pipe, 5000.0, LoadPoint(1024, 256, 16))
    assert c.aggregate_tokens_per_s < c.decode_tokens_per_s == pytest.approx(pipe.aggregate_tokens_per_s(16))


def test_open_loop_holds_below_capacity_and_counts_replicas() -> None:
    pipe = Pipeline((_stage(),))
    light = open_loop(pipe, 5000.0, LoadPoint(512, 256, 1, 0.1), 64)
    assert light.holds and light.utilisation < HEADROOM and light.replicas == 1
    assert light.ttft_p95_s >= light.ttft_p50_s > 0
    heavy = open_loop(pipe, 5000.0, LoadPoint(512, 256, 1, light.capacity_per_s * 3), 64)
    assert not heavy.holds and heavy.replicas >= math.ceil(3 / HEADROOM)
    # each replica then gets a share of the rate it holds with the margin
    share = open_loop(pipe, 5000.0, LoadPoint(512, 256, 1, heavy.rate_per_s / heavy.replicas), 64)
    assert share.holds


def test_aggregate_at_one_sequence_is_the_decode_speed() -> None:
    for engine, quant in (("llama.cpp", "Q4_K_M"), ("vllm", "bf16"), ("ollama", "Q4_K_M"), ("transformers", "bf16")):
        r = check("gemma-3-4b", "rtx-4090", quant=quant, engine=engine, settings=RunSettings(n_ctx=8192))
        perf = to_json(r)["performance"]
        assert perf is not None, engine
        assert perf["aggregate_tokens_per_s"] == pytest.approx(perf["decode_tokens_per_s"], rel=0.01), engine


@pytest.mark.parametrize("engine,quant", [("llama.cpp", "Q4_K_M"), ("vllm", "bf16"), ("ollama", "Q4_K_M")])
def test_parallel_requests_raise_the_aggregate(engine: str, quant: str) -> None:
    one = check("gemma-3-4b", "rtx-4090", quant=quant, engine=engine, settings=RunSettings(n_ctx=16384))
    many = check("gemma-3-4b", "rtx-4090", quant=quant, engine=engine,
                 settings=RunSettings(n_ctx=16384, n_parallel=8))
    a, b = to_json(one)["performance"], to_json(many)["performance"]
    assert b["aggregate_tokens_per_s"] > 3 * a["aggregate_tokens_per_s"]
    assert b["serving"]["per_user_tokens_per_s"] < a["serving"]["per_user_tokens_per_s"]


def test_traffic_answer_in_check_json() -> None:
    r = check("gemma-3-12b", "rtx-4090", quant="Q4_K_M", settings=RunSettings(n_ctx=32768, n_parallel=8),
              workload=Workload(traffic=Traffic(256, 0.5)))
    sv = to_json(r)["performance"]["serving"]
    assert sv["includes_prefill"] and sv["max_concurrency"] == 8
    t = sv["traffic"]
    assert t["holds"] == (t["utilisation"] <= HEADROOM) and t["replicas"] >= 1


@pytest.mark.parametrize("bad", [Traffic(0, None), Traffic(None, 0.0), Traffic(None, float("nan")),
                                 Traffic(None, -1.0), Traffic(10**9, None)])
def test_bad_traffic_is_one_line(bad: Traffic) -> None:
    with pytest.raises(BadInput):
        check("gemma-3-4b", "rtx-4090", workload=Workload(traffic=bad))


def _cluster(net=IDEAL, per_node: int = 1, gpu: str = "rtx-3090", nodes: int = 2) -> Cluster:  # noqa: ANN001
    g = select_hardware([gpu], None, []).gpus[0]
    return Cluster("t", tuple(Node(f"n{i}", f"10.0.0.{i + 1}", (g,) * per_node, None) for i in range(nodes)), net)


def test_rpc_plan_with_an_ideal_network_equals_one_machine() -> None:
    resolved = resolve_model("gemma-3-27b", [])
    settings = RunSettings(n_ctx=16384, n_parallel=2)
    plan = rpc_plan(_cluster(), resolved, "Q4_K_M", settings, 512, Traffic(128, None))
    local = check(resolved, ["rtx-3090", "rtx-3090"], quant="Q4_K_M", settings=settings,
                  workload=Workload(traffic=Traffic(128, None)))
    doc = to_json(local)
    assert [d.memory.total_bytes for d in plan.devices] == [d["total_bytes"] for d in doc["memory"]["devices"]]
    assert plan.performance is not None
    assert plan.performance.decode_tokens_per_s == pytest.approx(doc["performance"]["decode_tokens_per_s"], rel=1e-3)
    assert plan.performance.aggregate_tokens_per_s == pytest.approx(
        doc["performance"]["aggregate_tokens_per_s"], rel=1e-3)
    slow = rpc_plan(_cluster(replace(IDEAL, bytes_per_s=1.25e8, latency_s=100e-6)), resolved, "Q4_K_M", settings,
                    512, Traffic(128, None))
    assert slow.performance is not None and slow.performance.decode_tokens_per_s < plan.performance.decode_tokens_per_s
    assert slow.network["boundaries_crossing_network"] == 1  # remote GPU first, head last: one boundary


def test_rpc_network_term_is_the_protocols_round_trip_and_messages() -> None:
    """One RPC device before the head's GPU: one GET round trip per token; up its input activation, positions, the
    two masks (full and sliding-window) and index tensors, each SET_TENSOR framed; down its output activation."""
    resolved = resolve_model("gemma-3-27b", [])
    net = replace(IDEAL, bytes_per_s=1.25e9, latency_s=50e-6)
    plan = rpc_plan(_cluster(net), resolved, "Q4_K_M", RunSettings(n_ctx=8192), 512, Traffic())
    hidden = 4 * resolved.spec.n_embd
    sent = plan.network["bytes_per_token_per_sequence"]
    assert plan.network["round_trips_per_token"] == 1
    assert 2 * hidden + 2 * 512 < sent < 2 * hidden + 16 * 1024  # masks of 512 cells (F16) and 314-byte framing
    assert plan.network["seconds_per_token"] == pytest.approx(2 * 50e-6 + sent / 1.25e9)


def test_rpc_logits_come_back_over_the_network_when_the_head_has_no_gpu() -> None:
    """A head without GPUs (ggml-org/llama.cpp#16276's client: Gemma 3 4B on a remote RTX 5090 and GTX 1660 over
    gigabit, 33 tok/s): the device with the output layer returns n_vocab float32 logits per token, 1 MiB for
    Gemma's vocabulary, and each remote device costs a round trip (no server copies to another)."""
    from gemma_fit.hardware.cluster import Cluster, Network, Node

    gpus = tuple(select_hardware([g], None, []).gpus[0] for g in ("rtx-5090", "gtx-1660"))
    cluster = Cluster("t", (Node("client", "10.0.0.1", (), 64 << 30), Node("gpus", "10.0.0.2", gpus, 64 << 30)),
                      Network(1.25e8 * 0.94, 100e-6))
    resolved = resolve_model("gemma-3-4b", [])
    plan = rpc_plan(cluster, resolved, "Q4_0", RunSettings(n_ctx=4096), 512, Traffic(128, None))
    assert plan.network["round_trips_per_token"] == 2
    assert plan.network["bytes_per_token_per_sequence"] > 4 * resolved.spec.n_vocab  # the logits
    assert plan.network["seconds_per_token"] > 8e-3  # 1 MiB at 117.5 MB/s
    assert plan.performance is not None and plan.performance.decode_tokens_per_s < 100


def _vllm_settings(resolved: Any, settings: RunSettings, prompt_tokens: int, output_tokens: int | None = None) -> Any:
    """vLLM's settings as `check` maps llama.cpp's onto them."""
    request = CheckRequest(resolved, "bf16", settings, Hardware("none", (), None),
                           Workload(prompt_tokens, Traffic(output_tokens)))
    return VLLM.settings(request)


def test_vllm_ray_plan_memory_per_stage_and_ideal_network() -> None:
    assert pp_partition(62, 2) == [31, 31] and pp_partition(34, 4) == [8, 9, 9, 8] and sum(pp_partition(35, 4)) == 35
    resolved = resolve_model("gemma-3-27b", [])
    es = _vllm_settings(resolved, RunSettings(n_ctx=8192, n_parallel=8), 512, 128)
    ideal = ray_plan(_cluster(per_node=2), resolved, es, tp=2, pp=2)
    assert ideal.settings["tensor_parallel_size"] == 2 and ideal.settings["pipeline_parallel_size"] == 2
    assert len(ideal.devices) == 4 and ideal.network["seconds_per_token"] == 0
    slow = ray_plan(_cluster(replace(IDEAL, bytes_per_s=1.25e8, latency_s=1e-3), per_node=2), resolved, es, tp=2, pp=2)
    assert [d.memory.total_bytes for d in slow.devices] == [d.memory.total_bytes for d in ideal.devices]  # no network
    assert ideal.performance is not None and slow.performance is not None
    assert slow.performance.decode_tokens_per_s < ideal.performance.decode_tokens_per_s
    assert ideal.commands[0].startswith("ray start --head") and "--address 10.0.0.1:6379" in ideal.commands[1]


def test_cluster_file_is_read_strictly(tmp_path: Path) -> None:
    good = tmp_path / "c.yaml"
    good.write_text("name: x\nnetwork: {bandwidth_gbit: 10, latency_us: 50}\nnodes:\n"
                    "  - {name: a, host: 10.0.0.1, gpus: [rtx-3090]}\n"
                    "  - {name: b, host: 10.0.0.2, gpus: [rtx-3090]}\n")
    c = load_cluster(good)
    assert c is not None and c.network.bytes_per_s == 1.25e9 and c.network.latency_s == pytest.approx(50e-6)
    net = "network: {bandwidth_gbit: 1, latency_us: 5}\n"
    for text in ("network: {bandwidth_gbit: 10, latency_us: 50}\nnodes: []\n",
                 "network: {bandwidth_gbit: 0, latency_us: 5}\nnodes: [{name: a, host: h, gpus: [rtx-3090]}]\n",
                 "nodes: [{name: a, host: h, gpus: [rtx-3090]}]\n",
                 net + "nodes: [{name: a, host: h, gpus: [rtx-3090], x: 1}]\n",
                 net + "nodes: [{name: a, host: 'h; rm -rf /', gpus: [a4000]}]\n"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(BadInput):
            load_cluster(bad)


# --- every printed command, against the engines' own argument lists (tests/data/engine_flags) ---------------

def _options(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", a)]


MATRIX = [("gemma-3-27b", "rtx-4090", {}), ("gemma-4-26b-a4b", "rtx-4060-ti-16gb", {"n_cpu_moe": 6}),
          ("gemma-3-4b", "rtx-3060-12gb", {"n_parallel": 4, "kv_unified": True}), ("gemma-3n-e4b", "a4000", {}),
          ("gemma-3-12b", "cpu", {}), ("gemma-2-9b", "rtx-3090", {"cache_type_k": "q8_0", "cache_type_v": "q8_0"})]


@pytest.mark.parametrize("model,gpu,extra", MATRIX)
def test_llama_server_commands_use_real_flags(model: str, gpu: str, extra: dict) -> None:
    known = _flags("llama-server-0.3.36.txt")
    r = check(model, gpu, quant="Q4_K_M", settings=RunSettings(n_ctx=8192, **extra))
    doc = to_json(r)
    commands = [doc["llama_server_command"]]
    for command in commands:
        argv = shlex.split(command)
        unknown = [o for o in _options(argv) if o not in known]
        assert unknown == [], command


@pytest.mark.parametrize("model,quant,extra", [("gemma-3-27b", "bf16", {}), ("gemma-3-27b", "fp8", {}),
                                               ("gemma-3-27b", "awq", {}), ("gemma-4-12B", "fp16", {}),
                                               ("gemma-4-26b-a4b", "bf16", {"tensor_parallel_size": 2}),
                                               ("gemma-3-4b", "bf16",
                                                {"kv_cache_dtype": "fp8", "enforce_eager": True})])
def test_vllm_commands_use_real_flags(model: str, quant: str, extra: dict) -> None:
    known = _flags("vllm-serve-0.33.0.txt")
    r = check(model, ["h100-sxm", "h100-sxm"], quant=quant, engine="vllm", settings=RunSettings(n_ctx=8192),
              options=extra)
    argv = shlex.split(to_json(r)["command"])
    assert argv[:2] == ["vllm", "serve"] and re.fullmatch(r"[\w.-]+/[\w.-]+", argv[2])
    assert [o for o in _options(argv) if o not in known] == []
    if "--limit-mm-per-prompt" in argv:
        json.loads(argv[argv.index("--limit-mm-per-prompt") + 1])


def test_cluster_commands_use_real_flags() -> None:
    resolved = resolve_model("gemma-3-27b", [])
    ray_known, vllm_known = _flags("ray-start-2.60.0.txt"), _flags("vllm-serve-0.33.0.txt")
    rpc_known, server_known = _flags("rpc-server-0.3.36.txt"), _flags("llama-server-0.3.36.txt")
    es = _vllm_settings(resolved, RunSettings(n_ctx=8192), 512)
    ray = ray_plan(_cluster(per_node=2), resolved, es)
    for command in ray.commands:
        argv = shlex.split(command.split(" ", 2)[2] if command.startswith("ssh ") else command)
        known = ray_known if argv[0] == "ray" else vllm_known
        assert [o for o in _options(argv) if o not in known] == [], command
    rpc = rpc_plan(_cluster(), resolved, "Q4_K_M", RunSettings(n_ctx=8192), 512, Traffic())
    for command in rpc.commands:
        argv = shlex.split(command.split(" ", 2)[2] if command.startswith("ssh ") else command)
        assert argv[0] in ("ggml-rpc-server", "llama-server")
        known = rpc_known if argv[0] == "ggml-rpc-server" else server_known
        assert [o for o in _options(argv) if o not in known] == [], command
    assert re.fullmatch(r"[\w.:,-]+", shlex.split(rpc.commands[-1])[-1])


TAG = re.compile(r"[a-z0-9][a-z0-9._-]*:[A-Za-z0-9][A-Za-z0-9._-]*")


@pytest.mark.parametrize("model,quant", [("gemma-3-27b", "Q4_K_M"), ("gemma-3-27b", "Q8_0"), ("gemma-2-9b", "Q5_K_M"),
                                         ("gemma-3-12b", "Q3_K_S"), ("gemma-4-26b-a4b", "Q8_0")])
def test_ollama_commands_are_one_runnable_line(model: str, quant: str) -> None:
    r = check(model, "rtx-3090", quant=quant, engine="ollama")
    command = to_json(r)["command"]
    assert "#" not in command and "(" not in command
    argv = shlex.split(command.replace(";", " ; ").replace("&", " & "))
    env = [a for a in argv if re.fullmatch(r"OLLAMA_[A-Z_]+=\S+", a)]
    assert env and argv[len(env):len(env) + 2] == ["ollama", "serve"]
    runs = [argv[i + 1] for i, a in enumerate(argv) if a == "run" and argv[i - 1] == "ollama"]
    assert runs and all(TAG.fullmatch(t) or re.fullmatch(r"[\w.-]+", t) for t in runs), command


def test_transformers_snippets_compile() -> None:
    for quant in ("bf16", "fp8", "bnb-4bit", "bnb-8bit", "awq"):
        r = check("gemma-3-4b", "rtx-4090", quant=quant, engine="transformers")
        compile(to_json(r)["command"], "<snippet>", "exec")


@pytest.mark.parametrize("command", [["check"], ["serve-plan"]])
def test_transformers_snippet_pastes_from_the_terminal(command: list[str]) -> None:
    """The snippet as a user copies it from the terminal (at 80 columns): its lines at the left margin, real
    newlines (the terminal's escaping once printed them as \\x0a), and it compiles."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "gemma_fit", *command, "--engine", "transformers", "--gpu", "rtx-4090",
                          "--model", "gemma-3-4b"], capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "COLUMNS": "80"}).stdout
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(r"Python\)?:$", line.rstrip())) + 1
    snippet = "\n".join(lines[start:])  # the command is the last thing printed
    assert "\\x0a" not in out and snippet.startswith("import torch\n")
    compile(snippet, "<terminal>", "exec")


def test_llama_cpp_flag_lists_match_the_built_source(llama_bin: Path) -> None:
    """The committed llama-server / ggml-rpc-server lists are what the llama.cpp the tests build registers."""
    import subprocess
    import sys

    src = llama_bin.parent.parent / "src"
    script = Path(__file__).resolve().parent.parent / "scripts" / "extract_engine_flags.py"
    proc = subprocess.run([sys.executable, str(script), "--check", "llamacpp", str(src), "--label", "0.3.36"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _commands_in(doc: object) -> list[str]:
    """Every printed command in a JSON document: llama-server, vLLM, Ollama and recommend/buy commands."""
    out: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("llama_server_command", "command", "ollama_command") and isinstance(value, str):
                out.append(value)
            elif key == "commands" and isinstance(value, list):
                out.extend(v for v in value if isinstance(v, str))
            else:
                out.extend(_commands_in(value))
    elif isinstance(doc, list):
        for value in doc:
            out.extend(_commands_in(value))
    return out


def _check_command(command: str, lists: dict[str, set[str]]) -> list[str]:
    """Options a printed shell command gives its program that the program's own parser does not know."""
    if command.lstrip().startswith(("from ", "import ")):  # a transformers snippet
        compile(command, "<snippet>", "exec")
        return []
    bad: list[str] = []
    for part in re.split(r"\s*(?:&&|;|&)\s*", command):
        argv = shlex.split(part)
        while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):
            argv = argv[1:]
        if argv[:1] == ["ssh"]:
            argv = argv[2:]
        if not argv:
            continue
        program = "vllm serve" if argv[:2] == ["vllm", "serve"] else "ray start" if argv[:2] == ["ray", "start"] \
            else argv[0]
        if program in lists:
            bad += [f"{program}: {o}" for o in _options(argv) if o not in lists[program]]
        elif program == "ollama":
            assert argv[1] in ("serve", "run", "create", "pull"), command
            if argv[1] in ("run", "pull"):
                assert TAG.fullmatch(argv[2]) or re.fullmatch(r"[\w.-]+", argv[2]), command
        else:
            assert program in ("printf", "sleep"), f"unexpected program {program!r} in {command!r}"
    return bad


def test_every_command_in_the_golden_outputs_is_runnable() -> None:
    """The whole golden matrix (check, report, recommend, buy, every engine): each printed command's options
    exist in its program's argument list."""
    lists = {"llama-server": _flags("llama-server-0.3.36.txt"), "vllm serve": _flags("vllm-serve-0.33.0.txt"),
             "ray start": _flags("ray-start-2.60.0.txt"), "ggml-rpc-server": _flags("rpc-server-0.3.36.txt")}
    golden = json.loads((Path(__file__).parent / "data" / "golden" / "outputs.json").read_text())
    seen = 0
    for case, out in golden.items():
        if "--json" not in case or not out["stdout"].lstrip().startswith("{"):
            continue
        for command in _commands_in(json.loads(out["stdout"])):
            seen += 1
            assert _check_command(command, lists) == [], (case, command)
    assert seen > 100


def test_serving_terms_are_the_fit_of_the_published_runs() -> None:
    """model_db/engines/speed.yaml (vLLM) and model_db/llamacpp/batched_decode.yaml are what
    benchmarks/fit_serving.py fits on benchmarks/data/serving_runs.csv, and the fit holds its runs."""
    import sys
    from statistics import median

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fit_serving

    runs = fit_serving.runs()
    vllm = [r for r in runs if r["engine"] == "vllm" and r["use"] == "fit"]
    llama = [r for r in runs if r["engine"] == "llama.cpp" and r["use"] == "fit"]
    terms = fit_serving.fit_vllm(vllm)
    committed = yaml.safe_load(fit_serving.VLLM_YAML.read_text())["vllm"]["default"]
    assert fit_serving.rounded(terms) == committed
    fitted = fit_serving.fit_llamacpp(llama)
    doc = yaml.safe_load(fit_serving.LLAMA_YAML.read_text())
    assert doc["terms"]["weight_pass_share_per_sequence"] == fitted["reread"]
    metal = doc["backends"]["metal"]
    assert (metal["weight_pass_share_per_sequence"], metal["matrix_tile_efficiency"]) == (
        fitted["metal_reread"], fitted["metal_tile"])
    err = [abs(fit_serving.predict_vllm(r, terms) / float(r["aggregate_tps"]) - 1) for r in vllm]
    assert median(err) < 0.10
    err = [abs(fit_serving.predict_llamacpp(r, fitted) / float(r["aggregate_tps"]) - 1) for r in llama]
    assert median(err) < 0.10
    assert len({r["gpu"] + r["backend"] for r in llama}) >= 3  # fitted over several machines and backends
    checks = [r for r in runs if r["engine"] == "vllm" and r["use"] == "check"]
    assert median(abs(fit_serving.predict_vllm(r, terms) / float(r["aggregate_tps"]) - 1) for r in checks) < 0.25


@pytest.mark.parametrize("engine,quant", [("vllm", "bf16"), ("vllm", "fp8"), ("transformers", "bnb-4bit"),
                                          ("ollama", "Q4_K_M"), ("llama.cpp", "Q4_K_M")])
def test_every_gpu_gets_an_answer_or_one_line(engine: str, quant: str) -> None:
    """Every GPU in the database, with traffic: a document (speed or not) or BadInput, never another exception (an
    Apple GPU under vLLM, an AMD compute capability such as gfx942, a GPU without a tensor-rate figure)."""
    from gemma_fit.hardware.snapshot import known_hardware

    answered = 0
    for gpu in sorted(known_hardware().gpus):
        try:
            doc = to_json(check("gemma-3-4b", gpu, quant=quant, engine=engine,
                                workload=Workload(traffic=Traffic(64, 0.5)),
                                settings=RunSettings(n_ctx=8192 if engine == "llama.cpp" else 0, n_parallel=4)))
        except BadInput:
            continue
        answered += 1
        perf = doc["performance"]
        if perf is not None:  # transformers' generate is no server: a rate has no answer there
            assert perf["aggregate_tokens_per_s"] > 0
            assert engine == "transformers" or perf["serving"]["traffic"]["replicas"] >= 1
    assert answered > 50


def test_vllm_takes_every_layout_ray_can_place_and_the_planner_keeps_the_fastest() -> None:
    """2 nodes x 4 H200: TP2 x PP4 and PP8 (the layouts measured best on such a cluster) are vLLM's to run, a TP group
    may span the nodes (its all-reduces then cross the network), and without sizes the planner keeps the fastest."""
    resolved = resolve_model("gemma-3-27b", [])
    es = _vllm_settings(resolved, RunSettings(n_ctx=8192, n_parallel=64), 512, 128)
    lan = replace(IDEAL, bytes_per_s=50e9, latency_s=5e-6)
    cluster = _cluster(lan, per_node=4, gpu="h200-sxm")
    for tp, pp in ((2, 4), (1, 8), (8, 1), (4, 2)):
        plan = ray_plan(cluster, resolved, es, tp=tp, pp=pp)
        assert plan.verdict.value == "go" and len(plan.devices) == 8 and plan.performance is not None
    across = ray_plan(cluster, resolved, es, tp=8, pp=1)
    assert across.network["stages_spanning_nodes"] == 1 and across.network["boundaries_crossing_network"] == 0
    pp8 = ray_plan(cluster, resolved, es, tp=1, pp=8)
    assert pp8.network["boundaries_crossing_network"] == 1  # ranks fill a node, then the next: one stage boundary
    best = ray_plan(cluster, resolved, es)
    speeds = [ray_plan(cluster, resolved, es, tp=t, pp=p).performance.aggregate_tokens_per_s  # type: ignore[union-attr]
              for t, p in accepted_layouts(cluster, resolved.spec)]
    assert best.performance is not None and best.performance.aggregate_tokens_per_s == pytest.approx(max(speeds))
    assert best.reasons[0].startswith("the fastest of")
    with pytest.raises(BadInput, match="attention heads"):
        ray_plan(cluster, resolved, es, tp=3, pp=1)


def test_middle_pipeline_stages_hold_no_embedding() -> None:
    resolved = resolve_model("gemma-3-27b", [])
    es = _vllm_settings(resolved, RunSettings(n_ctx=8192), 512)
    plan = ray_plan(_cluster(nodes=4), resolved, es, tp=1, pp=4)
    stages = [cluster_device_json(d) for d in plan.devices]
    assert [d["layers"] for d in stages] == [15, 16, 16, 15]
    embedding = 2 * resolved.spec.n_vocab * resolved.spec.n_embd  # bf16
    assert stages[0]["weights_bytes"] == stages[3]["weights_bytes"]  # 15 layers and one embedding copy each
    assert stages[1]["weights_bytes"] == stages[2]["weights_bytes"]  # 16 layers, no embedding
    # the first stage: one layer fewer than a middle one, and the embedding
    assert 0 < stages[0]["weights_bytes"] - stages[1]["weights_bytes"] < embedding


@pytest.mark.parametrize("engine", ["llama.cpp", "vllm"])
def test_a_request_past_the_trained_context_is_bad_input(engine: str) -> None:
    """gemma-3-1b is trained on 32,768 tokens: llama-server caps a slot there and vLLM its --max-model-len, so a
    request of 32,000 + 1,000 tokens is served by neither (it was a GO), while 31,000 + 1,000 is planned."""
    from gemma_fit.api import serve_plan

    with pytest.raises(BadInput, match="trained context of 32,768"):
        serve_plan("gemma-3-1b", gpus=["h100-sxm"], engine=engine, prompt_tokens=32_000, output_tokens=1000)
    assert serve_plan("gemma-3-1b", gpus=["h100-sxm"], engine=engine, prompt_tokens=31_000,
                      output_tokens=1000)["verdict"] == "go"


def test_vllm_bursts_are_replayed_request_by_request() -> None:
    """A burst whose outputs stop at their own lengths lasts as long as its longest output while the batch thins:
    replayed step by step from the published per-request lengths (benchmarks/data/serving_bursts.yaml) every such run
    is within 25%, where N requests of the mean length decoding together overshoot the 10-request ones 2-3x."""
    import sys

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fit_serving

    terms = yaml.safe_load(fit_serving.VLLM_YAML.read_text())["vllm"]["default"]
    rows = [r for r in fit_serving.runs() if r["source_url"] in fit_serving.bursts()]
    assert len(rows) == len(fit_serving.bursts()) >= 9
    for r in rows:
        burst = fit_serving.bursts()[r["source_url"]]
        assert sum(burst["output_lens"]) / burst["duration_s"] == pytest.approx(float(r["aggregate_tps"]), rel=1e-3)
        assert abs(fit_serving.predict_vllm(r, terms) / float(r["aggregate_tps"]) - 1) < 0.25, r["setup"]
    small = [r for r in rows if int(r["concurrency"]) == 10 and r["tp"] == "1"]
    as_if_equal = {**small[0], "source_url": ""}  # the same mean lengths, every request decoding to the end together
    assert fit_serving.predict_vllm(as_if_equal, terms) > 2 * float(small[0]["aggregate_tps"])


def test_metal_matrix_vector_batches_read_the_weights_once_a_pass() -> None:
    """ggml-metal-ops.cpp: mul_mv_ext takes 2-5 columns in one pass over the weights, 6-8 in two (3, 4, 4 a pass);
    K-quants take 2 and 3 columns through mul_mv, one a pass (an M1 Max's Gemma 4 12B Q8_0: 8 sequences step 2.1x as
    long as 4; Q4_K_M: 2 step 1.8x as long as 1)."""
    from gemma_fit.speed.batch import StageWork, stage_step_s
    from gemma_fit.speed.serve_llamacpp import metal_columns_per_pass

    assert metal_columns_per_pass("Q8_0") == (2, 3, 4, 5, 3, 4, 4)
    assert metal_columns_per_pass("Q4_K")[:3] == (1, 1, 4)
    assert metal_columns_per_pass("IQ3_S") == (1,) * 7
    read = 1e9  # one second of weights at 1 GB/s
    base = StageWork("m", read, 0.0, 0.0, 0.0, 1.0, 1e9, 1e30, 0.0, overlap=False, reread=0.2)
    q8 = replace(base, columns_per_pass=metal_columns_per_pass("Q8_0"))
    assert stage_step_s(q8, 4) == pytest.approx(1.6)  # one pass, three further columns at 0.2 each
    assert stage_step_s(q8, 8) == pytest.approx(3.2)  # two such passes
    k = replace(base, columns_per_pass=metal_columns_per_pass("Q4_K"))
    assert stage_step_s(k, 2) == pytest.approx(2.0)  # mul_mv: the weights read for each column
    assert stage_step_s(base, 8) == pytest.approx(1 + 0.2 * 7)  # other backends: one pass, a share per sequence
