"""The speed model scored on the repo's published Gemma runs (benchmarks/evaluate_speed.py), per backend x metric x
concurrency: no group may get worse without the pinned figures (benchmarks/data/speed_evaluation.json) being
rewritten on purpose, and the published-run fits (model_db/llamacpp/speed_published.yaml) are what
benchmarks/fit_backends.py derives from those runs. Figures, not timings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import evaluate_speed  # noqa: E402
import fit_backends  # noqa: E402

SLACK_PCT = 0.5  # rounding of the pinned medians


def test_no_group_is_worse_than_pinned() -> None:
    pinned = {g["group"]: g for g in json.loads(evaluate_speed.PINNED.read_text())["groups"]}
    groups, _ = evaluate_speed.evaluate("group")
    now = {g["group"]: g for g in evaluate_speed.summary(groups)}
    assert set(now) == set(pinned), "groups changed: rerun benchmarks/evaluate_speed.py --write"
    worse = {k: (pinned[k]["median_abs_error_pct"], g["median_abs_error_pct"]) for k, g in now.items()
             if g["median_abs_error_pct"] > pinned[k]["median_abs_error_pct"] + SLACK_PCT or g["n"] != pinned[k]["n"]}
    assert not worse, f"median |error| (pinned, now) got worse: {worse}"


KINDS = ("decode", "prefill", "attention", "decode_kv", "expert_loop")


def test_published_fits_are_the_fit_of_the_runs() -> None:
    committed = yaml.safe_load(fit_backends.OUT.read_text())
    try:
        fit_backends.install({})
        rows = [r for r in evaluate_speed.rows() if evaluate_speed.predict_row(r)]
        for r in rows:
            r["group"] = fit_backends.group_of(r)
        table = fit_backends.fit_in_turn(rows)
    finally:  # the live tables back as shipped, for the tests this worker runs next
        fit_backends.install({k: committed.get(k, {}) for k in KINDS})
    assert {k: table[k] for k in KINDS} == {k: committed.get(k, {}) for k in KINDS}


def test_every_unfitted_run_names_a_scored_row() -> None:
    """benchmarks/data/unfitted_runs.yaml keeps runs out of the fits, never out of the scores: each entry names rows
    evaluate_speed scores (a stale URL or test name would silently fit the run again), and gives its reason."""
    entries = yaml.safe_load(fit_backends.UNFITTED.read_text())
    scored = {(r["source"], r["m"].test) for r in evaluate_speed.rows()}
    for e in entries:
        assert len(e["reason"]) > 80
        assert {(e["source_url"], t) for t in e["tests"]} <= scored, e["source_url"]
    groups, done = evaluate_speed.evaluate("group")
    excluded = [r for r in done if fit_backends.excluded(r)]  # an entry may name several rows (one file's variants)
    for e in entries:
        for t in e["tests"]:
            assert any(r["source"] == e["source_url"] and r["m"].test == t and e.get("model") in (None, r["model"])
                       for r in excluded), (e["source_url"], t)


def test_a_run_states_its_memory_as_the_flags_would() -> None:
    """A CPU run whose board runs slower memory than the CPU's rating says so in the `ram` column
    ("ddr4-2666 x4": daScript's Threadripper 3990X, 8x32 GB at 2666 MT/s); free text keeps the rated maximum."""
    assert evaluate_speed._ram("ddr4-2666 x4") == ("ddr4-2666", 4)
    assert evaluate_speed._ram("LPDDR5X-8000 x2") == ("lpddr5x-8000", 2)
    assert evaluate_speed._ram("quad-channel (speed not stated)") is None
    row = next(r for r in evaluate_speed.rows() if r["machine"] == "threadripper-3990x")
    hw = evaluate_speed.hardware_for(row)
    assert hw is not None and hw.ram_bandwidth_gbps is not None and 80 < hw.ram_bandwidth_gbps < 90  # 4 x 21.3 GB/s
