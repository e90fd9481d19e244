"""`gemma-fit bench`: llama.cpp's benchmark output read back, this machine's calibration kept and used by the next
answer for the same hardware (figures, never timings: what llama.cpp measured is whatever it measured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LLAMA_THREADS
from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.calibration_store import calibration_from, machine_key, read_store, save_run
from gemma_fit.hardware.select import select_hardware
from gemma_fit.jobs.bench_parse import batched_bench_jsonl, llama_bench_json, pasted_tables
from gemma_fit.speed.batch import factor_at

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]

# llama-bench b0c1e570 (this repo's CPU build) printed this table for a zero-weight gemma-3-270m Q8_0.
LLAMA_BENCH_TABLE = """\
| model  |  size |  params | backend  | threads |  test |  t/s |
| --- | ---: | ---: | --- | ---: | ---: | ---: |
| gemma3 270M Q8_0  | 271.81 MiB |  268.10 M | CPU  |  2 |  pp512 |  483.38 ± 2.73 |
| gemma3 270M Q8_0  | 271.81 MiB |  268.10 M | CPU  |  2 |  tg128 |  80.12 ± 0.41 |
| gemma3 270M Q8_0  | 271.81 MiB |  268.10 M | CPU  |  2 |  tg128 @ d4096 |  61.07 ± 0.20 |

build: unknown (0)
"""
BATCHED_TABLE = """\
|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   128 |    128 |    1 |    256 |    0.212 |   603.77 |    1.601 |    79.95 |    1.813 |   141.21 |
|   128 |    128 |    4 |   1024 |    0.850 |   602.35 |    3.276 |   156.29 |    4.126 |   248.15 |
"""


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **env})


def test_pasted_llama_bench_table() -> None:
    rows = pasted_tables(LLAMA_BENCH_TABLE)
    assert [(r.test, r.kind, r.n_prompt, r.n_gen, r.depth, r.tokens_per_s, r.threads) for r in rows] == [
        ("pp512", "prefill", 512, 0, 0, 483.38, 2), ("tg128", "decode", 0, 128, 0, 80.12, 2),
        ("tg128 @ d4096", "decode", 0, 128, 4096, 61.07, 2)]


def test_pasted_batched_bench_table() -> None:
    rows = pasted_tables(BATCHED_TABLE)
    assert [(r.kind, r.n_prompt, r.n_gen, r.concurrency, r.tokens_per_s) for r in rows] == [
        ("batched", 128, 128, 1, 79.95), ("batched", 128, 128, 4, 156.29)]


def test_llama_bench_json_and_batched_jsonl() -> None:
    bench = json.dumps([{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 483.4, "n_threads": 2,
                         "n_gpu_layers": 0, "build_number": 6325, "build_commit": "abc"},
                        {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 80.1, "n_threads": 2},
                        {"n_prompt": 512, "n_gen": 128, "n_depth": 0, "avg_ts": 100.0}])  # -pg: neither alone
    rows = llama_bench_json(bench)
    assert [(r.test, r.build) for r in rows] == [("pp512", "b6325"), ("tg128", None)]
    jsonl = ('{"pp": 128, "tg": 32, "pl": 2, "speed_tg": 150.5, "speed_pp": 600.0, "n_threads": 2}\n'
             "main: done\n")
    (row,) = batched_bench_jsonl(jsonl)
    assert (row.test, row.concurrency, row.tokens_per_s) == ("S_TG pp128+tg32 x2", 2, 150.5)


# llama-bench adds a column for each setting off its default: -ub 1 here (a prompt fed one token at a time).
UBATCH_TABLE = """\
| model  |  size |  params | backend  | ngl | n_ubatch |  test |  t/s |
| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |
| gemma3 12B Q4_0 | 6.41 GiB | 11.77 B | CUDA | 99 | 1 | pp256 | 98.77 ± 0.10 |
| gemma3 12B Q4_0 | 6.41 GiB | 11.77 B | CUDA | 99 | 512 | pp256 | 3012.00 ± 4.00 |
"""


def test_a_runs_ubatch_is_read_from_the_table_and_the_json() -> None:
    rows = pasted_tables(UBATCH_TABLE)
    assert [(r.test, r.n_ubatch, r.n_gpu_layers) for r in rows] == [("pp256", 1, 99), ("pp256", 512, 99)]
    (row,) = llama_bench_json(json.dumps([{"n_prompt": 256, "n_gen": 0, "avg_ts": 98.8, "n_batch": 2048,
                                           "n_ubatch": 1}]))
    assert (row.n_batch, row.n_ubatch) == (2048, 1)
    assert llama_bench_json(json.dumps([{"n_prompt": 256, "n_gen": 0, "avg_ts": 98.8}]))[0].n_ubatch is None


def test_a_prompt_at_ubatch_1_is_predicted_at_decode_speed_not_prefill_speed() -> None:
    """-ub 1 runs the matrix-vector kernels token by token (llama.cpp PR #29152's pp256 rows: 98.8 tok/s on an
    RTX 3090 for Gemma 4 12B Q4_0, its decode speed): each token costs its weight reads, as in decode."""
    from dataclasses import replace

    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.jobs.bench import predicted
    from gemma_fit.jobs.bench_parse import Measurement
    from gemma_fit.model.catalog import resolve_model

    hw = replace(hardware_of(["rtx-3090"], None, ()), speed_calibration=None)
    resolved = resolve_model("gemma-3-12b", ())
    plan = build_plan(resolved.spec, "Q4_0")
    prefill = Measurement("pp256", "prefill", 256, 0, 0, 1, 1.0)
    one_by_one = predicted(replace(prefill, n_ubatch=1), hw, resolved, plan, None)
    decode = predicted(Measurement("tg128", "decode", 0, 128, 0, 1, 1.0), hw, resolved, plan, None)
    assert 0.8 * decode < one_by_one < 1.5 * decode  # no output matrix per prompt token: a little faster
    assert predicted(prefill, hw, resolved, plan, None) > 10 * one_by_one
    eight = predicted(replace(prefill, n_ubatch=8), hw, resolved, plan, None)
    assert eight > 5 * one_by_one  # eight tokens share each weight read


@pytest.mark.parametrize("text", [
    "no table here", "| a | b |\n|---|---|\n| 1 | 2 |",
    "| test | t/s |\n|---|---|\n| pp512 | inf |", "| test | t/s |\n|---|---|\n| pp512 | -5 |",
    "| test | t/s |\n|---|---|\n| pp99999999 | 5 |", "x" * (2 * 1024 * 1024),
    "| test | t/s |\n|---|---|\n| pp512 | 1e999 |", "| test | t/s |\n|---|---|\n| pp512 | 1,2,3,4 |",
    "| test | t/s |\n|---|---|\n| pp" + "9" * 5000 + " | 5 |",
])
def test_pasted_garbage_is_one_clear_error(text: str) -> None:
    with pytest.raises(BadInput):
        pasted_tables(text)


def test_calibration_store_round_trip_and_medians(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    hw = select_hardware(["rtx-4090"], None, ())
    for measured in (90.0, 110.0, 100.0):
        save_run(hw, {"date": "2026-12-02", "model": "gemma-3-1b", "quant": "Q4_0",
                      "rows": [{"kind": "decode", "concurrency": 1, "predicted": 100.0, "measured": measured},
                               {"kind": "prefill", "concurrency": 1, "predicted": 1000.0, "measured": 500.0},
                               {"kind": "batched", "concurrency": 4, "predicted": 300.0, "measured": 150.0},
                               {"kind": "decode", "concurrency": 1, "predicted": 0, "measured": 5.0}]}, path)
    entry = read_store(path)["machines"][machine_key(hw)]
    cal = calibration_from(entry)
    assert cal is not None
    assert (cal.decode_factor, cal.prefill_factor, cal.batched_factors) == (1.0, 0.5, ((4, 0.5),))
    assert "calibrated here on 2026-12-02" in cal.label
    assert machine_key(hw) != machine_key(select_hardware(["rtx-3090"], None, ()))


@pytest.mark.parametrize("content", ["{not json", '{"schema": "other"}', "[]", '{"schema": "gemma-fit.calibration/1",'
                                     ' "machines": {"cpu:x": {"runs": [{"rows": [{"kind": "decode"}]}]}}}'])
def test_a_damaged_calibration_file_is_ignored(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cal.json"
    path.write_text(content)
    doc = read_store(path)
    assert all(calibration_from(e) is None for e in doc["machines"].values())


@given(st.lists(st.tuples(st.integers(1, 512), st.floats(0.05, 20)), min_size=1, max_size=6, unique_by=lambda p: p[0]),
       st.integers(1, 1024))
def test_factor_between_the_measured_points(points: list[tuple[int, float]], batch: int) -> None:
    pts = tuple(sorted(points))
    f = factor_at(pts, batch)
    values = [v for _, v in pts]
    assert min(values) - 1e-9 <= f <= max(values) + 1e-9
    for n, v in pts:
        assert factor_at(pts, n) == pytest.approx(v)


@pytest.mark.llamacpp
def test_bench_saves_a_calibration_the_next_check_uses(llama_bin: Path, tmp_path: Path) -> None:
    cal = tmp_path / "calibration.json"
    proc = cli("bench", "--model", "gemma-3-270m", "--synthetic", "--quant", "Q8_0", "-p", "32", "-n", "8", "-r", "1",
               "--parallel", "2", "--threads", LLAMA_THREADS, "--llama-bin", str(llama_bin), "--save", "--json",
               GEMMA_FIT_CALIBRATION=str(cal))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gemma-fit.bench/1" and doc["calibration_file"] == str(cal)
    tests = {r["test"]: r for r in doc["rows"]}
    assert set(tests) == {"pp32", "tg8", "S_TG pp32+tg8 x1", "S_TG pp32+tg8 x2"}
    for r in doc["rows"]:
        assert r["measured"] > 0 and r["predicted"] > 0
        # "measured" is printed to 3 decimals: on a slow (busy) machine that rounding alone moves the recomputed
        # error by up to 100 x predicted x 0.0005 / measured^2 points, beside error_pct's own rounding to 0.01
        slack = 0.01 + 100 * r["predicted"] * 0.0005 / r["measured"] ** 2
        assert r["error_pct"] == pytest.approx(100 * (r["predicted"] - r["measured"]) / r["measured"], abs=slack)
    check = ("check", "--gpu", "cpu", "--model", "gemma-3-270m", "--quant", "Q8_0", "--threads", LLAMA_THREADS,
             "--ctx", "4096", "--json")
    plain = json.loads(cli(*check).stdout)["performance"]
    done = cli(*check, GEMMA_FIT_CALIBRATION=str(cal))
    assert done.returncode == 0, done.stderr[-2000:]
    calibrated = json.loads(done.stdout)["performance"]
    note = next(n for n in calibrated["notes"] if n.startswith("calibrated here on"))
    assert "gemma-3-270m Q8_0" in note
    decode = tests["tg8"]["measured"] / tests["tg8"]["predicted"]
    single = tests["S_TG pp32+tg8 x1"]["measured"] / tests["S_TG pp32+tg8 x1"]["predicted"]
    factor = (decode + single) / 2  # the median of the two single-stream figures
    assert calibrated["decode_tokens_per_s"] == pytest.approx(plain["decode_tokens_per_s"] * factor, rel=0.01)
    prefill = tests["pp32"]["measured"] / tests["pp32"]["predicted"]
    assert calibrated["prefill_tokens_per_s"] == pytest.approx(plain["prefill_tokens_per_s"] * prefill, rel=0.01)
    other = json.loads(cli("check", "--gpu", "rtx-4090", "--model", "gemma-3-270m", "--json",
                           GEMMA_FIT_CALIBRATION=str(cal)).stdout)["performance"]
    assert not any(n.startswith("calibrated here") for n in other["notes"])  # another machine: not used


def test_bench_paste_reads_the_table_and_predicts(tmp_path: Path) -> None:
    table = tmp_path / "bench.md"
    table.write_text(LLAMA_BENCH_TABLE)
    proc = cli("bench", "--model", "gemma-3-270m", "--quant", "Q8_0", "--paste", str(table), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["source"] == "pasted table" and doc["calibration_file"] is None and doc["commands"] == []
    assert [r["test"] for r in doc["rows"]] == ["pp512", "tg128", "tg128 @ d4096"]
    assert all(r["predicted"] > 0 for r in doc["rows"])
    # deeper in the context each token reads more KV cache: the prediction falls as the measurement does
    assert doc["rows"][2]["predicted"] < doc["rows"][1]["predicted"]


@pytest.mark.parametrize("args", [
    ("--model", "gemma-3-270m"),  # neither --synthetic nor --paste
    ("--model", "gemma-3-270m", "--synthetic", "--parallel", "0"),
    ("--model", "gemma-3-270m", "--synthetic", "-r", "0"),
    ("--model", "gemma-3-270m", "--paste", "/nonexistent/table.md"),
    ("--model", "no-such-model", "--paste", "/dev/null"),
])
def test_bench_bad_input_is_one_line(args: tuple[str, ...]) -> None:
    proc = cli("bench", *args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_table_cell_of_non_ascii_digits_is_not_a_count() -> None:
    """'²' is a digit to str.isdigit, not to int(): the cell is read as not given, never an internal error."""
    table = ("| model | size | params | backend | ngl | threads | test | t/s |\n"
             "| --- | --- | --- | --- | --: | --: | --: | --: |\n"
             "| gemma3 12B Q4_K - Medium | 6.79 GiB | 11.77 B | CUDA | ² | ٣ | pp512 | 1234.56 ± 3.21 |\n")
    (row,) = pasted_tables(table)
    assert (row.n_gpu_layers, row.threads, row.tokens_per_s) == (None, None, 1234.56)


def test_saving_a_calibration_never_replaces_what_is_not_one(tmp_path: Path) -> None:
    hw = select_hardware(["rtx-4090"], None, ())
    run = {"date": "2026-12-03", "rows": []}
    folder = tmp_path / "calibration.json"
    folder.mkdir()
    with pytest.raises(BadInput, match="not a regular file"):
        save_run(hw, run, folder)
    damaged = tmp_path / "damaged.json"
    damaged.write_text("[" * 100_000)
    with pytest.raises(BadInput, match="move it away"):
        save_run(hw, run, damaged)
    assert damaged.read_text() == "[" * 100_000 and read_store(damaged)["machines"] == {}
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"schema": "gemma-fit.calibration/1", "machines": {machine_key(hw): {"runs": 5}}}))
    assert calibration_from(read_store(odd)["machines"][machine_key(hw)]) is None
    assert save_run(hw, run, odd) == odd and len(read_store(odd)["machines"][machine_key(hw)]["runs"]) == 1


def test_a_test_name_of_non_ascii_digits_is_no_test() -> None:
    """'pp٥١٢' is no llama-bench test (llama-bench prints ASCII): the row is not read as pp512."""
    table = "| test | t/s |\n|---|---|\n| pp\u0665\u0661\u0662 | 5 |\n| pp512 | 1,234.5 ± 2 |\n"
    (row,) = pasted_tables(table)
    assert (row.n_prompt, row.tokens_per_s) == (512, 1234.5)


def test_a_calibration_file_with_nan_is_not_one_and_is_kept(tmp_path: Path) -> None:
    """Python's json takes NaN, JSON does not: such a file is not a calibration (never saved over, never read)."""
    hw = select_hardware(["rtx-4090"], None, ())
    path = tmp_path / "cal.json"
    text = json.dumps({"schema": "gemma-fit.calibration/1", "machines": {machine_key(hw): {"runs": [
        {"rows": [{"kind": "decode", "concurrency": 1, "predicted": float("nan"), "measured": 1.0}]}]}}})
    path.write_text(text)
    assert read_store(path)["machines"] == {}
    with pytest.raises(BadInput, match="move it away"):
        save_run(hw, {"date": "2026-12-03", "rows": []}, path)
    assert path.read_text() == text


def test_the_saved_line_escapes_the_calibration_path(tmp_path: Path) -> None:
    table = tmp_path / "bench.md"
    table.write_text(LLAMA_BENCH_TABLE)
    folder = tmp_path / "x\x1b[2J"
    folder.mkdir()
    proc = cli("bench", "--model", "gemma-3-270m", "--quant", "Q8_0", "--paste", str(table), "--gpu", "rtx-4090",
               "--save", GEMMA_FIT_CALIBRATION=str(folder / "cal.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\x1b" not in proc.stderr and "x\\x1b[2J" in proc.stderr
