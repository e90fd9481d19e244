#!/usr/bin/env python3
"""Fit llama.cpp's fixed cost per drafting step on published speculative-decoding runs, and print the error.

Each step of speculative decoding costs the drafter's own passes and the target's verification (as the speed
model predicts them, engines/speculative.py) plus a fixed cost per drafted token that neither shows: the host
work between the drafter's passes (sampling, the hand-over of the target's hidden state, scheduling the two
contexts). benchmarks/data/speculative_runs.csv holds published runs with their draft lengths; a run that states no
acceptance has its per-draft acceptance fitted with the overhead (a run at several draft lengths pins both).

    python benchmarks/fit_speculative.py
Prints the fitted overhead and, per run, published against predicted tokens/s (the speed model's baseline
scaled to the published one, so only the speculative part is scored).
"""

from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("GEMMA_FIT_CALIBRATION", os.path.join(os.devnull, "none.json"))

import gemma_fit.engines.speculative as spec  # noqa: E402
from gemma_fit.jobs.check import check  # noqa: E402
from gemma_fit.memory.settings import RunSettings, Speculative  # noqa: E402
from gemma_fit.speed.speculative import tokens_per_step  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "speculative_runs.csv"


def parts(row: dict[str, str]) -> tuple[float, float, float]:
    """(plain decode seconds per token, verification seconds, one drafter pass) from gemma-fit's own prediction
    without the fixed cost being fitted."""
    spec.DRAFT_STEP_OVERHEAD_S = 0.0
    k = int(row["draft_max"])
    r = check(row["target"], [row["gpu_id"]], quant=row["quant"],
              settings=RunSettings(n_ctx=16384, speculative=Speculative("mtp", "", "", k, 0.5)))
    s = r.performance.speculative  # type: ignore[union-attr]
    plain = s["single_stream_speedup"] / s["decode_tokens_per_s"]
    return plain, s["verify_ms_per_step"] / 1e3, s["draft_ms_per_step"] / 1e3 / k


def predicted(row: dict[str, str], p: float, tau: float, parts_: tuple[float, float, float]) -> float:
    """Tokens/s with the drafter, the model's baseline scaled to the published one (only the speculative part is
    scored)."""
    plain, verify, draft = parts_
    k = int(row["draft_max"])
    # the published baseline over the model's, where the run states one (else the model's own stands)
    scale = 1.0 / (float(row["baseline_tokens_per_s"]) * plain) if row["baseline_tokens_per_s"] else 1.0
    return tokens_per_step(p, k) / (verify + k * (draft + tau)) * scale


def _runs(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        out.setdefault(f"{r['source']} {r['target']} {r['gpu_id']}", []).append(r)
    return out


def fit(rows: list[dict[str, str]], cached: dict[int, tuple[float, float, float]]) -> tuple[float, dict[str, float]]:
    """The overhead (and each run's acceptance where it states none) of least squared log error."""
    best: tuple[float, float, dict[str, float]] | None = None
    for tau_us in range(0, 5001, 50):
        tau = tau_us * 1e-6
        total, ps = 0.0, {}
        for name, mine in _runs(rows).items():
            stated = bool(mine[0]["accepted_share"])
            options = [None] if stated else [x / 100 for x in range(30, 96)]
            scored = []
            for p_fit in options:
                e = 0.0
                for r in mine:
                    k = int(r["draft_max"])
                    p = spec.per_draft_probability(float(r["accepted_share"]), k) if p_fit is None else p_fit
                    e += math.log(predicted(r, p, tau, cached[id(r)]) / float(r["speculative_tokens_per_s"])) ** 2
                scored.append((e, p_fit))
            e, p_fit = min(scored, key=lambda x: x[0])
            total += e
            if p_fit is not None:
                ps[name] = p_fit
        if best is None or total < best[0]:
            best = (total, tau, ps)
    assert best is not None
    return best[1], best[2]


def main() -> None:
    rows = list(csv.DictReader(DATA.open()))
    cached = {id(r): parts(r) for r in rows}
    tau, fitted_p = fit(rows, cached)
    print(f"fixed cost per drafted token: {tau * 1e3:.2f} ms (least squares of log error over {len(rows)} runs; "
          f"fitted acceptance where a run states none: {fitted_p})")
    for name, mine in _runs(rows).items():
        others = [r for r in rows if r not in mine]
        held_tau, _ = fit(others, cached) if others else (tau, {})
        for r in mine:
            k = int(r["draft_max"])
            p = (spec.per_draft_probability(float(r["accepted_share"]), k) if r["accepted_share"]
                 else fitted_p.get(name, 0.7))
            pub = float(r["speculative_tokens_per_s"])
            now, out = predicted(r, p, tau, cached[id(r)]), predicted(r, p, held_tau, cached[id(r)])
            print(f"  {r['target']:16s} {r['gpu_id']:24s} k={k} published {pub:6.1f}  predicted {now:6.1f} "
                  f"({(now / pub - 1) * 100:+5.1f}%)  this run left out {out:6.1f} ({(out / pub - 1) * 100:+5.1f}%)")


if __name__ == "__main__":
    main()
