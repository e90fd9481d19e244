"""memory/search.py: the one bisection behind -ngl auto, the largest context that fits and the
engines' max-context searches, checked against a linear scan; and the searches built on it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gemma_fit.gguf.tensors import build_plan
from gemma_fit.hardware.catalog import resolve_gpu
from gemma_fit.memory.estimate import estimate_memory
from gemma_fit.memory.search import auto_gpu_layers, largest_fitting, max_ctx_fit
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model


def linear(lo: int, hi: int, threshold: int) -> int:
    """The largest n in (lo, hi] with n <= threshold, scanning down; lo when there is none."""
    return next((n for n in range(hi, lo, -1) if n <= threshold), lo)


@settings(deadline=None)  # no wall-clock limit: a busy machine must not fail a test
@given(lo=st.integers(-50, 50), width=st.integers(-3, 200), offset=st.integers(-10, 210),
       hi_first=st.booleans())
def test_largest_fitting_matches_a_linear_scan(lo: int, width: int, offset: int, hi_first: bool) -> None:
    hi = lo + width
    threshold = lo + offset  # fits(n) is n <= threshold: true, then false (monotone)
    asked: list[int] = []

    def fits(n: int) -> bool:
        asked.append(n)
        return n <= threshold

    assert largest_fitting(lo, hi, fits, try_hi_first=hi_first) == linear(lo, hi, threshold)
    assert all(lo < n <= hi for n in asked)  # lo itself is never evaluated
    assert len(asked) <= max(0, hi - lo).bit_length() + 1
    if hi_first and lo < hi:
        assert asked[0] == hi


@settings(deadline=None)
@given(pattern=st.lists(st.booleans(), min_size=1, max_size=64), hi_first=st.booleans())
def test_largest_fitting_finds_the_last_true_of_any_monotone_run(pattern: list[bool], hi_first: bool) -> None:
    answers = sorted(pattern, reverse=True)  # any true...true false...false sequence
    lo, hi = 0, len(answers) - 1
    expected = max((n for n in range(lo + 1, hi + 1) if answers[n]), default=lo)
    assert largest_fitting(lo, hi, lambda n: answers[n], try_hi_first=hi_first) == expected


def test_auto_layers_and_max_context_match_a_linear_scan() -> None:
    spec = resolve_model("gemma-3-12b").spec
    plan = build_plan(spec, "Q8_0")
    devices = (resolve_gpu("rtx-3060"),)  # 12 GiB: a 12B Q8_0 offloads only some layers
    s = RunSettings(n_ctx=8192)
    n = auto_gpu_layers(plan, s, devices, None)
    on_gpu = [k for k in range(spec.n_layer + 2)
              if all(d.headroom_bytes >= 0 for d in estimate_memory(plan, s, devices, k, None).devices)]
    assert 0 < n < spec.n_layer + 1 and n == max(on_gpu)
    ctx = max_ctx_fit(plan, s, devices, n, None)
    fitting = [c for c in range(256, spec.n_ctx_train + 1, 256)
               if estimate_memory(plan, replace(s, n_ctx=c), devices, n, None).fits()]
    assert ctx == max(fitting, default=0)
