"""The one decision rule (gemma_fit.engines.decision) and the answers it gives in recommend, report and buy."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.engines.decision import QUALITY_RESOLUTION, Option, best, best_sound, rank
from gemma_fit.gguf.quality import Quality
from gemma_fit.jobs.check import hardware_of
from gemma_fit.jobs.recommend import Needs, recommend
from gemma_fit.jobs.report import run_report
from gemma_fit.memory.settings import RunSettings


def opt(name: str, score: float | None, decode: float, *, bits: float = 4.5, on_gpu: bool = True,
        model: str | None = None, ctx: int = 8192, room: int = 0) -> Option[str]:
    return Option(name, model or name, "Q", bits, on_gpu, Quality(score, None, 1.0, "test"), decode, ctx, room)


def order(options: list[Option[str]], min_tps: float = 10, prefer: str = "quality") -> list[str]:
    return [r.option.item for r in rank(options, min_tps, prefer)]


def test_a_plan_on_the_gpu_beats_an_offloaded_one_of_higher_quality() -> None:
    assert order([opt("q8-offload", 85.2, 14.6, bits=8.5, on_gpu=False), opt("q4-gpu", 84.9, 69.5)]) == [
        "q4-gpu", "q8-offload"]


def test_two_bit_plans_only_where_no_four_bit_plan_of_the_model_is_there() -> None:
    options = [opt("e4b-q2", 66.5, 33, bits=2.6, model="e4b"), opt("e4b-q4", 69.1, 25, model="e4b"),
               opt("e2b-q2", 55.0, 60, bits=2.6, model="e2b")]
    assert order(options) == ["e4b-q4", "e2b-q2"]


def test_quality_closer_than_the_data_resolves_is_a_tie_won_by_speed() -> None:
    assert order([opt("bf16", 85.2, 20), opt("q4", 85.2 - QUALITY_RESOLUTION + 0.01, 40)]) == ["q4", "bf16"]
    assert order([opt("bf16", 85.2, 20), opt("q4", 85.2 - QUALITY_RESOLUTION - 0.1, 40)]) == ["bf16", "q4"]


def test_the_speed_floor_comes_first_and_under_it_only_speed_counts() -> None:
    assert order([opt("slow", 90, 5), opt("fast", 50, 30)]) == ["fast", "slow"]
    assert order([opt("slower", 90, 2), opt("slow", 50, 5)]) == ["slow", "slower"]


def test_each_ranked_plan_says_why() -> None:
    ranked = rank([opt("gpu", 80, 30), opt("off", 85, 12, on_gpu=False), opt("q3", 70, 50, bits=3.4)], 10)
    assert [r.option.item for r in ranked] == ["gpu", "off", "q3"]
    assert "all on the GPU" in ranked[0].why and "system memory" in ranked[1].why and "3.4 bits" in ranked[2].why


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 200), st.booleans(), st.sampled_from([2.6, 3.4, 4.5, 8.5]),
                          st.sampled_from(["a", "b", "c"])), min_size=1, max_size=12))
def test_no_offloaded_or_low_bit_plan_above_a_sound_plan_at_a_usable_speed(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    options = [opt(f"{i}", q, d, bits=b, on_gpu=g, model=m) for i, (q, d, g, b, m) in enumerate(rows)]
    ranked = rank(options, 10)
    # usable and sound first, then usable, then the plans under the floor (by speed alone)
    classes = [(r.option.decode >= 10, r.option.sound if r.option.decode >= 10 else False) for r in ranked]
    assert classes == sorted(classes, reverse=True)
    assert best(options, 10) == (ranked[0] if ranked else None)
    kept = {r.option.item for r in ranked}
    for o in options:  # every plan is ranked but a model's 2-3-bit plans beside a 4-bit one
        assert (o.item in kept) == (not o.low_bit or not any(x.model == o.model and not x.low_bit for x in options))


@given(st.lists(st.tuples(st.sampled_from([50.0, 50.3, 60.0, None]), st.sampled_from([5.0, 20.0, 40.0]), st.booleans(),
                          st.sampled_from([2.6, 4.5, 8.5]), st.sampled_from(["a", "b"])), min_size=1, max_size=12))
def test_best_over_the_sound_and_fast_class_is_best_over_all(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    """A report builds its offloaded cells' options only when no cell on the GPU is sound and fast enough: the
    answer, its reason and its tie count are then the same."""
    options = [opt(f"{i}", q, d, bits=b, on_gpu=g, model=m) for i, (q, d, g, b, m) in enumerate(rows)]
    sound = best_sound([o for o in options if o.on_gpu], 10)
    assert sound is None or sound == best(options, 10)
    assert (sound is None) == (not any(o.sound and o.decode >= 10 for o in options))


def test_report_best_on_a_24gb_card_is_q4_on_the_gpu_not_q8_offloaded() -> None:
    report = run_report(["gemma-4-31B"], ["Q4_K_M", "Q8_0"], [["rtx-3090"], ["rtx-4090"]], [8192], RunSettings())
    rows = report["answer"]["best_per_hardware"]
    assert [(r["key"], r["quant"], r["verdict"]) for r in rows] == [("rtx-4090", "Q4_K_M", "go"),
                                                                     ("rtx-3090", "Q4_K_M", "go")]
    assert all(r["why"] for r in rows)


def test_recommend_on_small_unified_machines_puts_a_4_bit_plan_on_the_gpu_first() -> None:
    for gpu, ctx in (("jetson-orin-nano-super", 4096), ("m4-16gb", 32768)):
        first = recommend(hardware_of(gpu), Needs(n_ctx=ctx)).ranked[0].option()
        assert first.sound, (gpu, first.model, first.quant)
