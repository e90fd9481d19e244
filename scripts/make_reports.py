#!/usr/bin/env python3
"""Regenerate the sample reports in reports/ (one command: `python scripts/make_reports.py`).

The output is deterministic (no timestamps, no paths), so tests/test_reports.py regenerates it into a
temporary folder and compares byte for byte: a change to the estimate or the templates that is not
followed by a rerun of this script fails the test ("reports are stale").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gemma_fit.engines.llamacpp import run_check  # noqa: E402
from gemma_fit.hardware.select import select_hardware  # noqa: E402
from gemma_fit.jobs.report import (  # noqa: E402
    check_sources,
    gpu_ranking,
    run_report,  # noqa: E402
)
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402
from gemma_fit.present.documents import check_json  # noqa: E402
from gemma_fit.present.html import render_check_html, render_report_html  # noqa: E402

# name -> run_report arguments
REPORTS: dict[str, dict[str, Any]] = {
    "gemma-2-2b-9b-on-a4000-rtx-3060-rtx-4090": {
        "models": ["gemma-2-2b", "gemma-2-9b"], "quants": ["Q4_K_M", "Q5_K_M", "Q8_0"],
        "gpus": [["a4000"], ["rtx-3060-12gb"], ["rtx-4090"]], "contexts": [8192],
    },
    "gemma-3-27b-gemma-4-31b-on-24-to-80-gb": {
        "models": ["gemma-3-27b", "gemma-4-31B"], "quants": ["Q4_K_M"],
        "gpus": [["rtx-4090"], ["rtx-3090"], ["l40s"], ["a100-80gb-sxm"], ["h100-sxm"]],
        "contexts": [8192, 32768, 131072],
    },
}
# name -> (model, quant, GPUs, context)
CHECKS: dict[str, tuple[str, str, list[str], int]] = {
    "check-gemma-2-9b-Q5_K_M-on-a4000": ("gemma-2-9b", "Q5_K_M", ["a4000"], 4096),
}


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def generate() -> dict[str, str]:
    """File name -> content, for every sample report."""
    files: dict[str, str] = {}
    for name, args in REPORTS.items():
        report = run_report(args["models"], args["quants"], args["gpus"], args["contexts"], RunSettings(),
                            what_to_buy=True)
        files[f"{name}.json"] = _json(report)
        files[f"{name}.html"] = render_report_html(report)
    for name, (model, quant, gpus, ctx) in CHECKS.items():
        resolved = resolve_model(model)
        settings = RunSettings(n_ctx=ctx)
        doc = check_json(run_check(resolved, quant, settings, select_hardware(gpus, None, ())))
        files[f"{name}.json"] = _json(doc)
        files[f"{name}.html"] = render_check_html(doc, gpu_ranking(resolved, quant, settings), check_sources(doc))
    return files


def main() -> None:
    os.environ["GEMMA_FIT_NO_ENGINE_PROBE"] = "1"  # the committed reports do not depend on this machine's llama-server
    os.environ["GEMMA_FIT_CALIBRATION"] = os.path.join(os.devnull, "none.json")  # nor on its speed calibration
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "reports", help="output folder (default: reports/)")
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (out / name).write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {out / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
