"""`gemma-fit recommend`: the ranking's invariants over a matrix of machines and needs, its quality figures traced
to the published data, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.engines.decision import QUALITY_RESOLUTION
from gemma_fit.gguf.quality import benchmarks, quant_retention, retention
from gemma_fit.gguf.types import CONTRACT_QUANTS, file_type, recipes, unsloth_ud
from gemma_fit.jobs.check import hardware_of
from gemma_fit.jobs.recommend import Needs, recommend, recommend_document
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]
pytestmark = pytest.mark.xdist_group("recommend")  # one xdist worker: the matrix's recommendations are made once


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


MATRIX = [("rtx-4060-ti-16gb", 8192), ("rtx-4060-ti-16gb", 32768), ("rtx-3090", 8192), ("rtx-3090", 32768),
          ("rtx-4060", 8192), ("m4-max-64gb", 32768)]


@pytest.fixture(scope="module", params=MATRIX, ids=[f"{g}@{c}" for g, c in MATRIX])
def rec(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    gpu, ctx = request.param
    return recommend(hardware_of(gpu), Needs(n_ctx=ctx, top=8))


def test_every_recommended_plan_fits_with_the_margin_at_the_needed_context(rec) -> None:  # type: ignore[no-untyped-def]
    assert rec.ranked
    for c in rec.ranked:
        est = c.result.detail.estimate
        assert c.result.verdict in ("go", "offload")
        assert est.n_ctx == rec.needs.n_ctx
        assert all(d.headroom_bytes >= SAFETY_MARGIN_BYTES for d in est.devices)
        assert c.decode >= rec.min_tps


def test_nothing_ranks_below_a_plan_that_beats_it_on_every_axis(rec) -> None:  # type: ignore[no-untyped-def]
    ranked = list(rec.ranked)
    for i, low in enumerate(ranked):
        for high in ranked[i + 1:]:
            beats = all(x >= y for x, y in zip(high.axes(), low.axes(), strict=True)) and high.axes() != low.axes()
            assert not beats, (high.result.command, low.result.command)


def test_each_model_appears_once_and_quality_ranks_first_within_a_class(rec) -> None:  # type: ignore[no-untyped-def]
    """The decision rule: plans all on the GPU at 4+ bits first, then the rest; by quality within each."""
    models = [c.result.resolved.spec.id for c in rec.ranked]
    assert len(models) == len(set(models))
    sound = [c.option().sound for c in rec.ranked]
    assert sound == sorted(sound, reverse=True)
    for cls in (True, False):
        scores = [c.quality.score if c.quality.score is not None else -1 for c in rec.ranked if c.option().sound == cls]
        assert scores == sorted(scores, reverse=True)


def test_no_offloaded_or_low_bit_plan_ranks_above_a_4_bit_plan_on_the_gpu(rec) -> None:  # type: ignore[no-untyped-def]
    seen_unsound = False
    for c in rec.ranked:
        o = c.option()
        assert not (seen_unsound and o.sound), [x.result.command for x in rec.ranked]
        seen_unsound = seen_unsound or not o.sound
        if o.low_bit:  # a 2- or 3-bit file only where no 4-bit file of that model fits
            assert not any(x.option().model == o.model and not x.option().low_bit for x in rec.ranked)


def test_quality_is_the_published_benchmark_times_the_quants_retention(rec) -> None:  # type: ignore[no-untyped-def]
    for c in rec.ranked:
        bench = benchmarks(c.result.resolved.spec.id).get("mmlu_pro_it")
        if bench is None:
            assert c.quality.score is None
            continue
        kept, _ = quant_retention(c.result.detail.plan.ftype)
        assert c.quality.score == pytest.approx(bench.value * kept, abs=0.01)
        assert bench.source.startswith("https://")


def test_a_24gb_card_gets_the_31b_at_4_bits_on_the_gpu_and_the_moe_as_the_fast_alternative() -> None:
    rec = recommend(hardware_of("rtx-3090"), Needs(n_ctx=8192))
    first, second = rec.ranked[0], rec.ranked[1]
    assert (first.result.resolved.spec.id, first.result.detail.plan.ftype.name) == ("gemma-4-31B", "Q4_K_M")
    assert first.result.verdict == "go"
    assert second.result.resolved.spec.id == "gemma-4-26B-A4B" and second.decode > 2 * first.decode


def test_quant_steps_the_benchmarks_cannot_tell_apart_go_to_the_faster_plan() -> None:
    rec = recommend(hardware_of("rtx-3090"), Needs(n_ctx=8192))
    first = rec.ranked[0]
    bf16 = benchmarks("gemma-4-31B")["mmlu_pro_it"].value
    assert bf16 - (first.quality.score or 0) <= QUALITY_RESOLUTION  # Q4_K_M: 84.88 of 85.2


def test_a_speed_the_hardware_cannot_reach_returns_the_fastest_and_says_so() -> None:
    rec = recommend(hardware_of("rtx-3090"), Needs(n_ctx=8192, min_tps=100_000))
    doc = recommend_document(rec)
    assert not rec.meets_min_tps and rec.ranked
    assert doc["note"].startswith("no configuration reaches 100000 tok/s")
    assert max(c.decode for c in rec.ranked) == rec.ranked[0].decode or rec.needs.prefer == "quality"


def test_speed_and_context_objectives() -> None:
    hw = hardware_of("rtx-3090")
    fast = recommend(hw, Needs(n_ctx=8192, prefer="speed"))
    assert [c.decode for c in fast.ranked] == sorted((c.decode for c in fast.ranked), reverse=True)
    wide = recommend(hw, Needs(n_ctx=8192, prefer="context"))
    assert [c.max_ctx for c in wide.ranked] == sorted((c.max_ctx for c in wide.ranked), reverse=True)


def test_a_needed_context_past_a_models_training_leaves_it_out_and_says_so() -> None:
    rec = recommend(hardware_of("rtx-3090"), Needs(n_ctx=32768))
    assert any(s.startswith("gemma-2-9b: trained for 8,192 tokens") for s in rec.skipped)
    assert all(c.result.resolved.spec.n_ctx_train >= 32768 for c in rec.ranked)


def test_vision_keeps_models_with_a_tower_and_loads_the_projector() -> None:
    rec = recommend(hardware_of("rtx-3090"), Needs(n_ctx=8192, vision=True))
    assert rec.ranked
    for c in rec.ranked:
        entry = c.result.resolved.entry
        assert entry is not None and entry.towers is not None and entry.towers.vision is not None
        assert "--mmproj " in c.result.command
        assert c.result.detail.settings.mmproj_bytes > 0


def test_every_file_type_has_a_retention_from_the_data() -> None:
    for name in (*CONTRACT_QUANTS, *recipes(), *unsloth_ud()):
        kept, how = quant_retention(file_type(name))
        assert 0.5 < kept <= 1.0 and how != "not measured", name
    assert retention("Q4_K_M") == (pytest.approx(71.23 / 71.5), "measured on Gemma 3 27B, 5-shot MMLU")


@pytest.mark.parametrize(("needs", "message"), [
    (Needs(prefer="nope"), "--prefer nope is not one of quality, speed, context"),
    (Needs(top=0), "--top 0 is impossible"),
    (Needs(min_tps=-1), "--min-tps -1 is impossible"),
])
def test_impossible_needs_are_one_line(needs: Needs, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        recommend(hardware_of("rtx-3090"), needs)


def test_the_cli_prints_the_contracts_document() -> None:
    proc = run_cli("recommend", "--gpu", "rtx-3090", "--ctx", "8192", "--top", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gemma-fit.recommend/1" and doc["hardware"] == "GeForce RTX 3090"
    keys = {"rank", "model", "quant", "n_ctx", "verdict", "decode_tokens_per_s", "quality", "command", "why"}
    assert [c["rank"] for c in doc["candidates"]] == [1, 2, 3]
    assert all(keys <= set(c) for c in doc["candidates"])
    bad = run_cli("recommend", "--gpu", "rtx-3090", "--ctx", "-5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_ollama_recommendations_run_library_tags_and_count_the_vision_tower() -> None:
    rec = recommend(hardware_of("rtx-3090"), Needs(n_ctx=8192, top=3), engine="ollama")
    doc = recommend_document(rec)
    assert doc["engine"] == "ollama"
    for c, row in zip(rec.ranked, doc["candidates"], strict=True):
        assert "ollama run gemma4:" in row["command"] and row["command"].startswith("OLLAMA_CONTEXT_LENGTH=8192 ")
        assert c.result.detail.settings.mmproj_bytes > 0  # Ollama loads the projector in the blob
    with pytest.raises(BadInput, match="--engine vllm is not ranked yet"):
        recommend(hardware_of("rtx-3090"), Needs(), engine="vllm")
