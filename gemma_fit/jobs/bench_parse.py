"""What llama.cpp's benchmarks print, read back: llama-bench's JSON (`-o json`) and markdown table (what people
paste), llama-batched-bench's JSON lines (`--output-format jsonl`) and markdown table.

Each test becomes one Measurement: prompt processing (llama-bench pp N), single-stream generation (tg N) or the
generation of B sequences at once (batched-bench S_TG at B). Anything else in the input is skipped; input that
holds no test is one clear error. Bounded: at most MAX_PASTE_BYTES of text and MAX_TESTS tests.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record

Kind = Literal["prefill", "decode", "batched"]
MAX_PASTE_BYTES = 1024 * 1024
MAX_TESTS = 1000
MAX_TOKENS = 1 << 20  # a test longer than a million tokens is not a benchmark anyone ran


@record
class Measurement:
    """One test llama.cpp ran: what it was and the tokens per second it printed."""

    test: str  # as llama-bench names it: "pp512", "tg128", "tg128 @ d4096"; batched: "S_TG pp128+tg128 x4"
    kind: Kind
    n_prompt: int  # prompt tokens per sequence (pp N; batched PP)
    n_gen: int  # generated tokens per sequence (tg N; batched TG)
    depth: int  # tokens already in the context before the test (llama-bench -d)
    concurrency: int  # sequences at once (1 for llama-bench)
    tokens_per_s: float
    threads: int | None = None
    n_gpu_layers: int | None = None
    build: str | None = None  # llama.cpp's build number or commit, where printed
    n_batch: int | None = None  # -b / -ub as the run set them (None: llama-bench's defaults, 2048 and 512); a
    n_ubatch: int | None = None  # prompt at -ub 1 goes token by token, at decode's speed, not prefill's


def test_name(kind: Kind, n_prompt: int, n_gen: int, depth: int, concurrency: int) -> str:
    if kind == "batched":
        return f"S_TG pp{n_prompt}+tg{n_gen} x{concurrency}"
    name = f"pp{n_prompt}" if kind == "prefill" else f"tg{n_gen}"
    return f"{name} @ d{depth}" if depth else name


def _count(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(f"benchmark output: {what} is not a number")
    if isinstance(value, str) and _digits(value) and len(value.strip()) > 18:  # past int()'s digit limit too
        raise BadInput(f"benchmark output: {what} {value.strip()[:12]}... ({len(value.strip())} digits) is out of "
                       f"range ({low} to {MAX_TOKENS:,})")
    try:
        n = int(value)
    except ValueError:
        raise BadInput(f"benchmark output: {what} '{str(value)[:20]}' is not a whole number") from None
    if not low <= n <= MAX_TOKENS:
        shown = str(n) if len(str(value)) <= 20 else f"{str(value)[:12]}... ({len(str(value))} characters)"
        raise BadInput(f"benchmark output: {what} {shown} is out of range ({low} to {MAX_TOKENS:,})")
    return n


def _digits(value: Any) -> bool:
    """A table cell of ASCII digits only ('²' and '٣' are digits to str.isdigit, not to int())."""
    return isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()


def _rate(value: Any, what: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"benchmark output: {what} '{str(value)[:20]}' is not a number") from None
    if not math.isfinite(x) or x <= 0 or x > 1e9:
        raise BadInput(f"benchmark output: {what} {x:g} is not a speed (tokens/s above 0, at most 1e9)")
    return x


def _measurement(kind: Kind, n_prompt: int, n_gen: int, depth: int, concurrency: int, tps: float,
                 **extra: Any) -> Measurement:
    return Measurement(test_name(kind, n_prompt, n_gen, depth, concurrency), kind, n_prompt, n_gen, depth,
                       concurrency, tps, **extra)


def _bench_kind(n_prompt: int, n_gen: int) -> Kind | None:
    if n_prompt > 0 and n_gen == 0:
        return "prefill"
    if n_gen > 0 and n_prompt == 0:
        return "decode"
    return None  # pp+tg together (-pg): neither figure alone


def _build(row: dict[str, Any]) -> str | None:
    number, commit = row.get("build_number"), row.get("build_commit")
    if isinstance(number, int) and number > 0:
        return f"b{number}"
    return str(commit)[:12] if commit and commit != "unknown" else None


def llama_bench_json(text: str) -> list[Measurement]:
    """llama-bench -o json: one object per test."""
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"llama-bench printed no JSON ({exc})") from None
    if not isinstance(rows, list):
        raise BadInput("llama-bench's JSON is not a list of tests")
    out = []
    for row in rows[:MAX_TESTS]:
        if not isinstance(row, dict):
            continue
        n_prompt, n_gen = _count(row.get("n_prompt", 0), "n_prompt"), _count(row.get("n_gen", 0), "n_gen")
        kind = _bench_kind(n_prompt, n_gen)
        if kind is None:
            continue
        ngl = row.get("n_gpu_layers")
        out.append(_measurement(kind, n_prompt, n_gen, _count(row.get("n_depth", 0), "n_depth"), 1,
                                _rate(row.get("avg_ts"), "avg_ts"), threads=_count(row.get("n_threads", 1), "threads"),
                                n_gpu_layers=ngl if isinstance(ngl, int) else None, build=_build(row),
                                **_batches(row.get("n_batch"), row.get("n_ubatch"))))
    return out


def _batches(n_batch: Any, n_ubatch: Any) -> dict[str, int]:
    """-b and -ub as a run printed them (JSON numbers or table cells), where it printed them."""
    out = {}
    for key, value in (("n_batch", n_batch), ("n_ubatch", n_ubatch)):
        if isinstance(value, str) and not _digits(value):
            continue  # an empty or odd table cell: the run's default
        if value is not None:
            out[key] = _count(value, key, 1)
    return out


def batched_bench_jsonl(text: str) -> list[Measurement]:
    """llama-batched-bench --output-format jsonl: one object per (PP, TG, B); the S_TG figure of each."""
    out = []
    for line in text.splitlines()[:MAX_TESTS]:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or "speed_tg" not in row:
            continue
        tg = _count(row.get("tg"), "tg")
        if tg == 0:
            continue
        out.append(_measurement("batched", _count(row.get("pp"), "pp"), tg, 0, _count(row.get("pl"), "pl", 1),
                                _rate(row["speed_tg"], "speed_tg"), threads=_count(row.get("n_threads", 1), "threads"),
                                n_gpu_layers=row.get("n_gpu_layers") if isinstance(row.get("n_gpu_layers"), int)
                                else None))
    return out


# "1234.56 ± 7.89" (a thousands comma every three digits at most): the whole cell, so that 1e999 or 1,2,3,4 is no figure
_CELL_RATE = re.compile(r"^\s*((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?)\s*(?:(?:±|\+/-)\s*[0-9.,]+)?\s*$")
_BENCH_TEST = re.compile(r"^(pp|tg)([0-9]+)(?:\s*@\s*d([0-9]+))?$")  # ASCII digits: '٥١٢' is no test length


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_rate(cell: str) -> float:
    m = _CELL_RATE.match(cell)
    if not m:
        raise BadInput(f"pasted table: '{cell[:30]}' is not a tokens/s figure")
    return _rate(m.group(1).replace(",", ""), "t/s")


def pasted_tables(text: str) -> list[Measurement]:
    """llama-bench's or llama-batched-bench's markdown table, as copied from a terminal or a web page."""
    if len(text.encode("utf-8", errors="replace")) > MAX_PASTE_BYTES:
        raise BadInput(f"the pasted benchmark is larger than {MAX_PASTE_BYTES // 1024} KiB")
    out: list[Measurement] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if "|" not in line:
            header = None if not line.strip() else header
            continue
        cells = _cells(line)
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the |---|---| line
        lowered = [c.lower() for c in cells]
        if "test" in lowered and "t/s" in lowered or "s_tg t/s" in lowered:
            header = lowered
            continue
        if header is None or len(cells) != len(header) or len(out) >= MAX_TESTS:
            continue
        row = dict(zip(header, cells, strict=True))
        m = _BENCH_TEST.match(row.get("test", ""))
        if m and "t/s" in row:
            kind: Kind = "prefill" if m.group(1) == "pp" else "decode"
            n = _count(m.group(2), "test length", 1)
            threads = row.get("threads")
            ngl = row.get("ngl")
            out.append(_measurement(kind, n if kind == "prefill" else 0, n if kind == "decode" else 0,
                                    _count(m.group(3) or 0, "depth"), 1, _table_rate(row["t/s"]),
                                    threads=_count(threads, "threads", 1) if _digits(threads) else None,
                                    n_gpu_layers=_count(ngl, "ngl") if _digits(ngl) else None,
                                    **_batches(row.get("n_batch"), row.get("n_ubatch"))))
        elif "s_tg t/s" in row and _count(row.get("tg", "0"), "TG") > 0:
            out.append(_measurement("batched", _count(row.get("pp", "0"), "PP"), _count(row["tg"], "TG"), 0,
                                    _count(row.get("b", "1"), "B", 1), _table_rate(row["s_tg t/s"])))
    if not out:
        raise BadInput("no llama-bench test found in the pasted text: paste the table llama-bench prints (its "
                       "header names 'test' and 't/s') or llama-batched-bench's (with 'S_TG t/s')")
    return out
