"""CPU decode efficiency against DATASHEET memory bandwidth, from published CPU-only llama.cpp runs.

Reads benchmarks/data/cpu_published_runs.csv (every row has the URL where its numbers are written),
takes the token-generation rows marked use_in_median (dense models, all cores, bandwidth known), and
computes for each the effective bandwidth (model bytes x tokens/s) over the datasheet bandwidth. The
median per CPU family (x86: AVX2/AVX-512/AMX; arm: NEON/SVE) is the efficiency the speed model applies
to datasheet (or given) system-memory bandwidth. Prints the per-row ratios and the leave-one-out error
of the decode prediction (each row predicted with the median of the others), and with --write stores
the medians in model_db/llamacpp/cpu_decode.yaml.
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "benchmarks" / "data" / "cpu_published_runs.csv"
TABLE = REPO / "model_db" / "llamacpp" / "cpu_decode.yaml"
GIB = 1024**3
FAMILY = {"avx2": "x86", "avx512": "x86", "amx": "x86", "neon": "arm", "sve": "arm"}


def rows() -> list[dict[str, object]]:
    out = []
    for r in csv.DictReader(RUNS.open(encoding="utf-8")):
        if not r["test"].startswith("tg") or r.get("use_in_median") != "yes":
            continue
        size = re.match(r"[\d.]+", r["model_size_gib"] or "")
        if size is None or not r["datasheet_bandwidth_gbps"]:
            continue
        effective = float(size.group()) * GIB * float(r["tokens_per_s"]) / 1e9
        out.append({"cpu": r["cpu"], "family": FAMILY[r["isa"].split("+")[0].strip()],
                    "ratio": effective / float(r["datasheet_bandwidth_gbps"]), "source": r["source_url"]})
    return out


def medians(data: list[dict[str, object]]) -> dict[str, tuple[float, int]]:
    out = {}
    for fam in sorted({str(d["family"]) for d in data}):
        ratios = [float(d["ratio"]) for d in data if d["family"] == fam]  # type: ignore[arg-type]
        out[fam] = (round(statistics.median(ratios), 3), len(ratios))
    return out


def leave_one_out(data: list[dict[str, object]]) -> list[float]:
    """|predicted/measured - 1| per row, the efficiency taken from the other rows of its family."""
    errors = []
    for i, d in enumerate(data):
        others = [float(o["ratio"]) for j, o in enumerate(data) if j != i and o["family"] == d["family"]]  # type: ignore[arg-type]
        if others:
            errors.append(abs(statistics.median(others) / float(d["ratio"]) - 1))  # type: ignore[arg-type]
    return errors


def main() -> None:
    data = rows()
    for d in data:
        print(f"  {d['family']:4} {float(d['ratio']):.2f}  {d['cpu']}")  # type: ignore[arg-type]
    fitted = medians(data)
    errors = leave_one_out(data)
    for fam, (eff, n) in fitted.items():
        print(f"{fam}: decode efficiency {eff:.3f} of datasheet bandwidth (median of {n} runs)")
    print(f"leave-one-out decode error: median {statistics.median(errors):.0%}, max {max(errors):.0%} "
          f"over {len(errors)} runs")
    if "--write" in sys.argv:
        head = "".join(line for line in TABLE.read_text(encoding="utf-8").splitlines(keepends=True)
                       if line.startswith("#"))
        body = {"source": "benchmarks/fit_cpu_decode.py over benchmarks/data/cpu_published_runs.csv",
                "families": {fam: {"efficiency": eff, "n": n} for fam, (eff, n) in fitted.items()}}
        TABLE.write_text(head + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")

if __name__ == "__main__":
    main()
