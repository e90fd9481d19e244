"""`gemma-fit report`: what it refuses up front, what a large matrix keeps per cell, and its output paths.

Refused (exit 2, one line on stderr, nothing on stdout, no file written): an unknown engine, impossible
settings for any engine, more than MAX_CELLS cells, and a report whose every cell is an error.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gemma_fit.base.errors import BadInput
from gemma_fit.engines import registry
from gemma_fit.engines.base import EngineSettings, validate_numbers
from gemma_fit.engines.llamacpp import run_check
from gemma_fit.hardware.select import select_hardware
from gemma_fit.jobs import report as report_module
from gemma_fit.jobs import report_cells
from gemma_fit.jobs.report import run_report
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import check_json
from gemma_fit.present.report_view import render_tables

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]
ENGINES = ("llama.cpp", "vllm", "ollama", "transformers")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def assert_bad_input(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


# --- refused up front ----------------------------------------------------------------------------------------

def test_unknown_engine_is_bad_input_up_front(tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    proc = run("report", "--model", "9b", "--gpu", "a4000", "--engine", "tensorrt", "--html", str(html))
    assert_bad_input(proc, "--engine tensorrt is not one of llama.cpp, ollama, vllm, transformers")
    assert not html.exists()
    with pytest.raises(BadInput, match="--engine tensorrt"):
        run_report(["9b"], [], [["a4000"]], [], RunSettings(), engine="tensorrt")


def test_engine_names_are_spelled_as_the_report_knows_them() -> None:
    assert run_report(["270m"], [], [["a4000"]], [], RunSettings(), engine="LlamaCpp")["engine"] == "llama.cpp"
    assert run_report(["9b"], ["bf16"], [["h100-sxm"]], [], RunSettings(), engine=" VLLM ")["engine"] == "vllm"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("settings", "ctx", "message"), [
    (RunSettings(), -5, "--ctx -5 is impossible"),
    (RunSettings(), 10**9, "--ctx 1000000000 is impossible"),
    (RunSettings(n_parallel=0), 4096, "--parallel 0 is impossible"),
    (RunSettings(n_parallel=-1), 4096, "--parallel -1 is impossible"),
    (RunSettings(n_batch=0), 4096, "--batch 0 is impossible"),
    (RunSettings(n_ubatch=-512), 4096, "--ubatch -512 is impossible"),
    (RunSettings(n_gpu_layers=-3), 4096, "--n-gpu-layers -3 is impossible"),
    (RunSettings(cache_type_k="q9"), 4096, "--cache-type-k q9 is not a llama.cpp cache type"),
])
def test_every_engine_refuses_impossible_settings_before_any_cell(
        engine: str, settings: RunSettings, ctx: int, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_cell(*_: Any, **__: Any) -> dict[str, Any]:
        raise AssertionError("a cell ran")

    monkeypatch.setattr(report_cells, "cell", no_cell)
    quant = "Q4_K_M" if engine in ("llama.cpp", "ollama") else "bf16"
    with pytest.raises(BadInput, match=message.replace("(", r"\(")):
        run_report(["9b", "270m"], [quant], [["h100-sxm"]], [ctx], settings, engine=engine)


@pytest.mark.parametrize(("args", "message"), [
    (["--ctx", "-5"], "--ctx -5 is impossible"),
    (["--parallel", "0"], "--parallel 0 is impossible"),
    (["--batch", "0"], "--batch 0 is impossible"),
    (["--n-gpu-layers", "-3"], "--n-gpu-layers -3 is impossible"),
])
def test_vllm_report_checks_the_inputs_on_the_command_line(args: list[str], message: str) -> None:
    assert_bad_input(run("report", "--model", "9b", "--gpu", "h100-sxm", "--engine", "vllm", "--quant", "bf16",
                         *args), message)


def _settings(engine: str, quant: str, **values: Any) -> EngineSettings[Any]:
    """An engine's settings with these values (its own options by name, the shared ones as fields)."""
    kind = registry.engine_named(engine).options
    mine = {k: v for k, v in values.items() if k in {f.name for f in fields(kind)}}
    shared = {k: v for k, v in values.items() if k not in mine}
    return EngineSettings(engine, quant, kind(**mine), **shared)


@pytest.mark.parametrize(("settings", "message"), [
    (("vllm", "bf16", {"max_model_len": -5}), "--ctx -5 is impossible"),
    (("vllm", "bf16", {"max_num_seqs": 0}), "--parallel 0 is impossible"),
    (("vllm", "bf16", {"images_per_prompt": -1}), "--images -1 is impossible"),
    (("vllm", "bf16", {"gpu_memory_utilization": float("nan")}), "--gpu-memory-utilization nan"),
    (("vllm", "bf16", {"tensor_parallel_size": 0}), "--tensor-parallel-size 0 is impossible"),
    (("transformers", "bf16", {"batch_size": 0}), "--batch-size 0 is impossible"),
    (("transformers", "bf16", {"max_new_tokens": -1}), "--max-new-tokens -1 is impossible"),
    (("ollama", "Q4_K_M", {"gpu_overhead_bytes": -1}), "--gpu-overhead -1 is impossible"),
])
def test_engine_numbers_are_validated_for_every_engine(settings: tuple[str, str, dict[str, Any]],
                                                       message: str) -> None:
    engine, quant, values = settings
    with pytest.raises(BadInput) as err:
        validate_numbers(_settings(engine, quant, **values))
    assert message in str(err.value)


def test_engine_defaults_pass_validation() -> None:
    for engine in ("vllm", "ollama", "transformers"):
        validate_numbers(_settings(engine, "bf16"))


def test_a_report_whose_every_cell_is_an_error_is_bad_input(tmp_path: Path) -> None:
    """Every cell refused (a GGUF quant on vLLM): no answer, so exit 2 with the reason; no table, JSON or file."""
    html = tmp_path / "r.html"
    for extra in ([], ["--json"], ["--html", str(html)]):
        proc = run("report", "--model", "9b", "--model", "2b", "--gpu", "h100-sxm", "--engine", "vllm",
                   "--quant", "Q4_K_M", *extra)
        assert_bad_input(proc, "no combination could be checked (all 2 cells are errors): --quant Q4_K_M is not "
                               "a vLLM weight format")
    assert not html.exists()


def test_every_cell_refused_in_the_library_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import gemma_fit.engines.llamacpp as check_module

    def refuse(*_: Any) -> RunSettings:
        raise BadInput("refused")

    monkeypatch.setattr(check_module, "validate", refuse)
    with pytest.raises(BadInput, match=r"no combination could be checked \(the one cell is an error\): refused"):
        run_report(["9b"], [], [["a4000"]], [], RunSettings())


def test_a_report_with_some_error_cells_still_answers() -> None:
    """vLLM on a CPU-only config is an error cell; the GPU's cells still answer: exit 0, the error listed."""
    proc = run("report", "--model", "9b", "--gpu", "h100-sxm", "--gpu", "cpu", "--engine", "vllm", "--quant", "bf16")
    assert proc.returncode == 0, proc.stderr
    assert "1 error" in proc.stdout and "error: cpu gemma-2-9b bf16" in proc.stdout


def test_more_than_a_million_cells_is_refused_before_any_check() -> None:
    ctx_args = [a for c in range(1, 41) for a in ("--ctx", str(256 * c))]
    proc = run("report", "--model", "all", "--quant", "all", "--gpu", "all", *ctx_args, "--quiet")
    assert_bad_input(proc, "cells (")
    assert "contexts), more than 1,000,000: narrow --gpu, --model, --quant or --ctx" in proc.stderr
    assert "x 40 contexts" in proc.stderr and "x 26 quants" in proc.stderr


def test_matrix_cap_counts_before_checking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "MAX_CELLS", 3)
    monkeypatch.setattr(report_cells, "cell", lambda *_, **__: pytest.fail("a cell ran"))
    with pytest.raises(BadInput, match=r"the report would have 4 cells \(2 hardware configs x 1 models x 2 quants "
                                       r"x 1 contexts\), more than 3"):
        run_report(["9b"], ["Q4_K_M", "Q8_0"], [["a4000"], ["l4"]], [4096], RunSettings())


# --- what a cell keeps -----------------------------------------------------------------------------------------

MATRIX = (["9b", "270m", "gemma-3-27b"], ["Q4_K_M", "Q8_0"], [["a4000"], ["rtx-4090+rtx-4090"], ["cpu"], ["t4"]],
          [4096, 0])


def test_small_reports_keep_the_full_check_document() -> None:
    report = run_report(*MATRIX, RunSettings())
    assert len(report["cells"]) == 48 <= report_module.FULL_CHECK_MAX_CELLS and "check_documents" not in report
    cell = report["cells"][0]
    doc = check_json(run_check(resolve_model("9b"), "Q4_K_M", RunSettings(n_ctx=4096),
                               select_hardware(["a4000"], None, ())))
    assert cell["check"] == doc


def test_large_reports_keep_compact_cells_with_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    full = run_report(*MATRIX, RunSettings())
    monkeypatch.setattr(report_module, "FULL_CHECK_MAX_CELLS", 10)
    compact = run_report(*MATRIX, RunSettings())
    assert "48 cells, more than 10" in compact["check_documents"]
    assert {k: v for k, v in compact.items() if k not in ("cells", "check_documents")} == \
           {k: v for k, v in full.items() if k != "cells"}
    verdicts = set()
    for f, c in zip(full["cells"], compact["cells"], strict=True):
        assert set(f) == set(c)  # the same keys as today's cells
        assert {k: v for k, v in f.items() if k != "check"} == {k: v for k, v in c.items() if k != "check"}
        doc = f["check"]
        assert c["check"] == {"schema": "gemma-fit.check/1", "compact": True,
                              "llama_server_command": doc["llama_server_command"],
                              "assumptions": doc["assumptions"]}
        verdicts.add(c["verdict"])
    assert {"go", "offload"} <= verdicts  # the comparison covered more than one kind of cell
    by_hw: dict[str, list[Any]] = {}
    for c in compact["cells"]:
        by_hw.setdefault(c["hardware"], []).append(c["check"]["assumptions"])
    for lists in by_hw.values():  # one shared list per hardware, not one per cell
        assert all(x is lists[0] for x in lists)
    json.dumps(compact)


@pytest.mark.parametrize("full_max", [1000, 10])
def test_worker_processes_make_the_same_report(full_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cells shared out over forked workers (a plan per task, finished in any order) land where the serial
    loop puts them, equal in every figure and document; compact cells share their assumption lists again."""
    monkeypatch.setattr(report_module, "FULL_CHECK_MAX_CELLS", full_max)
    serial = run_report(*MATRIX, RunSettings(), workers=1)
    parallel = run_report(*MATRIX, RunSettings(), workers=2)
    assert parallel == serial
    if full_max < 48:
        by_hw: dict[str, list[Any]] = {}
        for c in parallel["cells"]:
            by_hw.setdefault(c["hardware"], []).append(c["check"]["assumptions"])
        assert all(x is lists[0] for lists in by_hw.values() for x in lists)


def test_only_large_matrices_on_linux_start_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = report_cells.matrix_cells

    def spy(m: report_cells.Matrix, progress: Any = None, workers: int | None = None) -> list[dict[str, Any]]:
        seen.append(report_cells.workers_for(m))
        return real(m, progress, 1)

    monkeypatch.setattr(report_module, "matrix_cells", spy)
    run_report(*MATRIX, RunSettings())
    assert seen == [1]  # 48 cells: this process
    monkeypatch.setattr(report_cells, "PARALLEL_MIN_CELLS", 10)
    monkeypatch.setattr(report_cells.os, "sched_getaffinity", lambda _: {0, 1, 2}, raising=False)
    monkeypatch.setattr(report_cells.sys, "platform", "linux")
    run_report(*MATRIX, RunSettings())
    monkeypatch.setattr(report_cells.sys, "platform", "darwin")
    run_report(*MATRIX, RunSettings())
    assert seen[1:] == [3, 1]


def _deep_size(obj: Any, seen: set[int]) -> int:
    if id(obj) in seen or isinstance(obj, (bool, type(None))):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        size += sum(_deep_size(x, seen) for x in obj)
    return size


def test_a_compact_cell_takes_a_small_fixed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory per cell, counted object by object (objects shared between cells counted once)."""
    full = run_report(*MATRIX, RunSettings())
    monkeypatch.setattr(report_module, "FULL_CHECK_MAX_CELLS", 10)
    compact = run_report(*MATRIX, RunSettings())
    per_cell_full = _deep_size(full["cells"], set()) / len(full["cells"])
    per_cell_compact = _deep_size(compact["cells"], set()) / len(compact["cells"])
    assert per_cell_compact < 2.5 * 1024, per_cell_compact
    assert per_cell_full > 3 * per_cell_compact, (per_cell_full, per_cell_compact)


def test_engine_reports_compact_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "FULL_CHECK_MAX_CELLS", 1)
    report = run_report(["9b", "gemma-3-27b"], ["bf16"], [["h100-sxm"]], [4096], RunSettings(), engine="vllm")
    check = report["cells"][0]["check"]
    assert check["compact"] is True and check["engine"] == "vllm" and isinstance(check["command"], str)


# --- output paths ----------------------------------------------------------------------------------------------

def test_table_printed_in_pieces_is_the_same_as_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from gemma_fit.present import report_view
    report = run_report(*MATRIX, RunSettings())

    def printed() -> str:
        buf = io.StringIO()
        render_tables(Console(file=buf, width=200, force_terminal=False, highlight=False), report)
        return buf.getvalue()

    whole = printed()
    monkeypatch.setattr(report_view, "TABLE_CHUNK_ROWS", 5)
    assert printed() == whole
    lines = whole.splitlines()
    assert len(lines) == 4 * (1 + 3 + 12) and lines[0] == "" and lines[1] == "a4000: RTX A4000"
    assert sum("gemma-2-9b" in x for x in lines) == 4 * 4


def test_a_compact_report_is_written_one_cell_per_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from gemma_fit.present.report_view import write_report_json

    monkeypatch.setattr(report_module, "FULL_CHECK_MAX_CELLS", 10)
    report = run_report(*MATRIX, RunSettings())
    for doc in (report, {**report, "cells": []}):
        out = io.StringIO()
        write_report_json(doc, out)
        assert json.loads(out.getvalue()) == doc
        lines = out.getvalue().splitlines()
        assert sum(line.startswith('    {"hardware": ') for line in lines) == len(doc["cells"])
        assert list(json.loads(out.getvalue())) == list(doc)  # the keys in the report's order
    report["cells"][0]["decode_tokens_per_s"] = float("inf")
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_report_json(report, io.StringIO())
