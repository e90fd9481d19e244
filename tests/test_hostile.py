"""Hostile input on the newer surfaces: recommend, buy (and its --prices files), serve-plan (and cluster files, under
llama.cpp RPC and vLLM on Ray), machine files on check / recommend / report, and -ot patterns on check / report.

The rule every case is held to (the README's contract):
- bad input: exit 2, exactly one line on stderr starting with `gemma-fit: error: `, nothing on stdout;
- good input: an answer, exit 0 (go / tight), 3 (offload) or 4 (no-go);
- either way: no traceback, no "internal error", no raw control characters (C0 but newline and tab, DEL, C1) and no
  bidi overrides or isolates (U+202A-U+202E, U+2066-U+2069) on stdout or stderr, whatever the names in the input
  held; rich markup in a name (`[/]`, `[bold]`) shown as text; `--json` strict JSON (no NaN, no Infinity); the
  files the user gave are left as they were.
Some cases accept either outcome (ANY): refusing a name with a control character, or answering with it escaped, are
both right; what is never right is a crash, a hang, or raw terminal codes.

Each case is its own process running the real entry point (`gemma_fit.cli.entry:main`, so exit statuses and the
one-line errors are the program's own) with its own stdin/stdout/stderr, under resource limits (address space, CPU
seconds) set in the child itself. By default a fork server per worker thread imports gemma_fit once and forks a child
per case; GEMMA_FIT_HOSTILE_SPAWN=1 starts a fresh `python -c` per case instead (7x the CPU, the same verdicts).
All selected cases run once, in parallel, in a module fixture; each case is then its own test, so a case that fails
today carries `xfail(strict=True)` with its root cause (CAUSES below, empty since every known cause was fixed;
docs/hostile.md), and turns the suite red when a fix lands without removing the mark. No case measures
wall-clock time: the subprocess timeout only guards against a hang, and a timeout is reported as a failure.
GEMMA_FIT_HOSTILE_RECORD=FILE writes every outcome (exit, output, problems) as JSON, for the failure report.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

# Under pytest-xdist every worker collects every case, and the module fixture runs all the selected ones in its own
# threads: one group keeps the corpus in one worker, which runs it once on all cores (run twice, it cost 2x the CPU).
pytestmark = pytest.mark.xdist_group("hostile")

HANG_GUARD_S = 240  # only a guard against a hang: no case is judged on its time

BAD, OK, ANY = "bad input", "answers", "bad input or answers"
ANSWER_CODES = {0, 3, 4}
# what must never reach a terminal from user data: C0 controls but \t and \n, DEL, C1 controls, line and paragraph
# separators, bidi marks, embeddings, overrides and isolates, zero-width characters
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069"
                    "\ufeff]")
FIFO = object()  # a file value: make a named pipe there (nobody writes to it: reading it would hang)


@dataclass(frozen=True)
class Case:
    surface: str
    name: str
    args: tuple[str, ...]  # "{file}" is replaced by the path of that file
    expect: str
    files: dict[str, Any] = field(default_factory=dict)  # name -> str | bytes | FIFO
    must: tuple[str, ...] = ()  # substrings stdout must hold when the command answers
    must_not: tuple[str, ...] = ()  # substrings stdout must not hold
    xfail: str | None = None
    columns: int = 2000  # the terminal width the command sees (COLUMNS): wide, so that names are shown whole

    @property
    def id(self) -> str:
        return f"{self.surface}:{self.name}"


CASES: list[Case] = []


def add(surface: str, name: str, args: list[str] | tuple[str, ...], expect: str, **kw: Any) -> None:
    CASES.append(Case(surface, name, tuple(args), expect, **kw))


def q(text: str) -> str:
    """A YAML double-quoted scalar holding exactly `text` (JSON's string syntax is YAML's)."""
    return json.dumps(text)


# Names a user might give, and what each must look like once shown: control characters escaped, markup as text.
# (value, the text that must appear on stdout when the command answers, or "" to check nothing more)
HOSTILE_NAMES: dict[str, tuple[str, str]] = {
    "ansi": ("x\x1b[31mRED\x1b[0m", "\\x1b[31mRED"),
    "osc-title": ("x\x1b]0;pwned\x07", "\\x1b]0;pwned"),
    "clear-screen": ("\x1b[2J\x1b[Hx", "\\x1b[2J"),
    "c1-csi": ("x\x9b31mRED", "\\x9b31mRED"),
    "bidi-rlo": ("evil\u202egnp.exe", "\\u202e"),
    "bidi-isolate": ("a\u2066b\u2069c", "\\u2066"),
    "bidi-rlm": ("box\u200f", "box\\u200f"),
    "zero-width": ("gem\u200bma", "gem\\u200bma"),
    "newline-forge": ("box\nFAKE LINE: go", "box\\x0aFAKE LINE: go"),
    "carriage-return": ("box\rFAKE", "box\\x0dFAKE"),
    "backspace": ("box\x08\x08\x08xyz", "box\\x08\\x08\\x08xyz"),
    "markup-close": ("box [/]", "box [/]"),
    "markup-bold": ("[bold]box[/bold]", "[bold]box[/bold]"),
    "markup-bad-close": ("box [/zz]", "box [/zz]"),
    "markup-link": ("[link=http://evil.example]box[/link]", "[link=http://evil.example]box[/link]"),
    "markup-escape": ("box \\[x]", "box \\[x]"),
}
# names the machine file's schema must refuse or show escaped: only printable markup must be answered
MARKUP = {"markup-close", "markup-bold", "markup-bad-close", "markup-link", "markup-escape"}
FORGED = ("\nFAKE",)

M1 = "gemma-3-1b"
REC = ["recommend", "--gpu", "rtx-4090"]
BUY = ["buy", "--model", M1]
SP = ["serve-plan", "--gpu", "rtx-4090", "--model", M1]
CHK = ["check", "--gpu", "rtx-4090", "--model", M1]
REP = ["report", "--gpu", "rtx-4090", "--model", M1]


# how a value reads in a case's id (ids are ASCII; the exact value is in the case)
_SPELLED = {"true": "true", "false": "false", "-1": "negative", "0": "zero", ".nan": "nan", ".inf": "inf",
            "-.inf": "minus-inf", "null": "null", "[10]": "list", "{a: 1}": "mapping", "1.0e-300": "1e-300",
            "1e-300": "1e-300-as-yaml-string", "1.0e+308": "1e308", "1e308": "1e308-as-yaml-string", "": "empty"}


def named(values: list[str]) -> list[tuple[str, str]]:
    """(id-friendly name, value) for each value, names unique."""
    def spell(v: str) -> str:
        if v in _SPELLED:
            return _SPELLED[v]
        if len(v) >= 2 and v[0] == v[-1] == '"':
            return "str-" + (spell(v[1:-1]) if v[1:-1] else "empty")
        if v[:1] in "[{":
            return ("list-" if v[0] == "[" else "map-") + spell(v[1:-1])
        return re.sub(r"[^A-Za-z0-9.+-]+", "_", ascii(v)[1:-1]).strip("_") or "empty"

    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for v in values:
        name = spell(v)[:40]
        while name in seen:
            name += "+"
        seen.add(name)
        out.append((name, v))
    return out


def _bomb(lead: str, key: str) -> str:
    """A billion-laughs file: 9^10 values once its aliases are followed."""
    lines = [lead.rstrip("\n"), 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join([*lines, f"{key}: *a9"]) + "\n"


# --- recommend: every option ---------------------------------------------------------------------------------------

_REC_BAD = {
    "ctx": ["-1", "-5", "0", "abc", "1e3", "nan", "inf", "", str(2**40), "9" * 30, "1.5k"],
    "min-tps": ["-1", "-0.001", "nan", "inf", "-inf", "abc", "1e308", "1e7", ""],
    "top": ["0", "-1", "101", str(10**20), "abc", "1.5", ""],
    "margin": ["-1", "nan", "inf", "1e308", "1025", "abc"],
    "reserve": ["-1", "nan", "inf", "1e308", "1025"],
    "ram": ["-1", "0", "nan", "inf", "1e308", "1e-300", "0.1", "true", "abc"],
    "ram-channels": ["0", "-1", "25", str(10**20), "1.5"],
    "cores": ["0", "-1", "1025"],
    "threads": ["0", "-1", "1025"],
    "parallel": ["0", "-1", "257", str(10**20)],
    "ubatch": ["0", "-4", str(10**12)],
    "batch": ["0", "-1"],
    "prefer": ["nonsense", "", "[/]", "\x1b[31mquality", "quality\u202e"],
    "engine": ["vllm", "transformers", "tensorrt", "", "[bold]x[/zz]", "\x1b]0;t\x07"],
    "backend": ["metal", "[/]", "\x1b[2J"],
    "flash-attn": ["maybe", "[/]"],
    "gpu": ["rtx-9999", "\x1b]0;title\x07rtx", "[/]", "[bold]x[/zz]", ""],
    "cpu": ["no-such-cpu", "[/]", "\x1b[2J"],
    "ram-type": ["ddr9-1", "[/]", "\x1b[31m"],
    "disk": ["tape", "[/]", "\x1b[31m"],
}
for _opt, _values in _REC_BAD.items():
    for _n, _v in named(_values):
        add("recommend", f"{_opt}-{_n}", ["recommend", "--gpu", _v] if _opt == "gpu" else [*REC, f"--{_opt}", _v],
            BAD)
add("recommend", "gpu-bidi-prefix", ["recommend", "--gpu", "\u202ertx-4090", "--top", "1"], BAD)  # never loosely
add("recommend", "gpu-17", ["recommend", *["--gpu", "rtx-4090"] * 17], BAD)
add("recommend", "gpu-cpu-and-gpu", ["recommend", "--gpu", "cpu", "--gpu", "rtx-4090"], BAD)
add("recommend", "hardware-missing", ["recommend", "--hardware", "/nonexistent/m.yaml"], BAD)
add("recommend", "hardware-dev-zero", ["recommend", "--hardware", "/dev/zero"], BAD)
add("recommend", "hardware-dev-null", ["recommend", "--hardware", "/dev/null"], BAD)
add("recommend", "hardware-dir", ["recommend", "--hardware", "/tmp"], BAD)
add("recommend", "hardware-fifo", ["recommend", "--hardware", "{m.yaml}"], BAD, files={"m.yaml": FIFO})
# answers (each one ranks every model: kept few)
add("recommend", "ok-ctx-1", [*REC, "--ctx", "1"], OK)
add("recommend", "ok-json-all", [*REC, "--min-tps", "0", "--top", "100", "--json"], OK)
add("recommend", "ok-prefer-upper", [*REC, "--prefer", " SPEED "], OK)
add("recommend", "ok-ollama-json", [*REC, "--engine", "ollama", "--json"], OK)
add("recommend", "ok-ctx-max-json", [*REC, "--ctx", "16777216", "--json"], OK)
add("recommend", "ok-min-tps-max", [*REC, "--min-tps", "1e6", "--json"], OK)
add("recommend", "ok-min-tps-tiny", [*REC, "--min-tps", "1e-300", "--top", "1", "--json"], OK)
add("recommend", "ok-cpu-tiny-ram", ["recommend", "--gpu", "cpu", "--ram", "0.25", "--json"], OK)
add("recommend", "ok-margin-max", [*REC, "--margin", "1024", "--json"], OK)
add("recommend", "ok-machine-flags", [*REC, "--cpu", "Ryzen 9 7950X", "--ram", "65536", "--ram-type", "ddr5-6000",
                                      "--ram-channels", "24", "--threads", "1024", "--cores", "1024", "--top", "1"], OK)

# --- buy: every option ---------------------------------------------------------------------------------------------

_BUY_BAD = {
    "ctx": ["-1", "-5", "0", "abc", str(2**40), "nan"],
    "min-tps": ["-1", "nan", "inf", "1e308", "abc"],
    "budget": ["0", "-1", "nan", "inf", "-inf", "1e308", "1e9", "abc", ""],
    "max-gpus": ["0", "-1", "5", str(10**20), "1.5"],
    "top": ["0", "101", "-3"],
    "margin": ["-1", "nan", "2000"],
    "quant": ["Q9_K", "", "[/]", "\x1b[31mq4_k_m", "q4_k_m\n", "Q4_K_M\u202e", "autox"],
    "segment": ["gaming", "", "[/]", "\x1b[2J", "apple\u202e"],
    "prices": ["/nonexistent/p.yaml", "/dev/zero", "/dev/null", "/tmp"],
    "html": ["/tmp", "/nonexistent/dir/out.html"],
}
for _opt, _values in _BUY_BAD.items():
    for _n, _v in named(_values):
        add("buy", f"{_opt}-{_n}", [*BUY, f"--{_opt}", _v], BAD)
for _n, _m in named(["gemma-9-1b", "[bold]x[/zz]", "\u202e9b", "", "\x1b[2J27b"]):
    add("buy", f"model-{_n}", ["buy", "--model", _m], BAD)
add("buy", "no-model", ["buy"], BAD)
add("buy", "prices-fifo", [*BUY, "--prices", "{p.yaml}"], BAD, files={"p.yaml": FIFO})
add("buy", "ok-auto-json", [*BUY, "--quant", "auto", "--json"], OK)
add("buy", "ok-budget-tiny-json", [*BUY, "--budget", "1e-300", "--json"], OK)
add("buy", "ok-budget-max", [*BUY, "--budget", "1e8"], OK)
add("buy", "ok-used-json", [*BUY, "--used", "--json", "--top", "100"], OK)
add("buy", "ok-offload-4", [*BUY, "--allow-offload", "--max-gpus", "4"], OK)
add("buy", "ok-min-tps-max", [*BUY, "--min-tps", "1e6", "--json"], OK)
add("buy", "ctx-max", [*BUY, "--ctx", "16777216", "--json"], ANY)
add("buy", "ok-segment-case", [*BUY, "--segment", " APPLE ", "--segment", "consumer"], OK)
add("buy", "ok-two-models", ["buy", "--model", "27b", "--model", "9b", "--top", "3"], OK)

# --- buy --prices FILE.yaml ------------------------------------------------------------------------------------------

STREET = '{usd: 999, date: "2026-11", source: "https://shop.example/4090"}'


def entry(id_: str = "rtx-4090", segment: str = "consumer", street: str = STREET, extra: str = "") -> str:
    return f"  - id: {id_}\n    segment: {segment}\n    street: {street}\n{extra}"


def prices(*entries: str) -> str:
    return "prices:\n" + "".join(entries)


def point(usd: str = "999", date: str = '"2026-11"', source: str = '"https://shop.example/x"') -> str:
    return f"{{usd: {usd}, date: {date}, source: {source}}}"


PBUY = [*BUY, "--prices", "{p.yaml}"]
_PRICE_BAD: dict[str, str | bytes] = {}
for _n, _usd in named(["true", "false", '"999"', "-1", "0", ".nan", ".inf", "-.inf", "1.0e+308", "1e308",
                           "1.0e-300", "1e-300", "null", "[999]", "100000001"]):
    _PRICE_BAD[f"usd-{_n}"] = prices(entry(street=point(usd=_usd)))
for _n, _date in named(['"2026-13"', '"2026-00-01"', '"abc"', "2026", '"0000"', '"0000-01"', '"2026-Q5"', '""',
                            '"2026-02-30"', "2026-11-01", '"2026-11-01T00:00"', '"\\u0662\\u0660\\u0662\\u0666"']):
    _PRICE_BAD[f"date-{_n}"] = prices(entry(street=point(date=_date)))
for _n, _src in named(['"short"', '""', "null", "42"]):
    _PRICE_BAD[f"source-{_n}"] = prices(entry(street=point(source=_src)))
for _n, _id in named(["RTX 4090", "rtx-9999", q("\x1b[31mrtx-4090"), '""', "4090", q("[/]"), q("rtx-4090\u202e")]):
    _PRICE_BAD[f"id-{_n}"] = prices(entry(id_=_id))
for _n, _seg in named(["gaming", "null", q("[/]"), q("\x1b[2J"), "[consumer]"]):
    _PRICE_BAD[f"segment-{_n}"] = prices(entry(segment=_seg))
for _n, _w in named(["0", "-1", "true", "1.0e-300", "1.0e+308", ".nan", '"450"', "100001"]):
    _PRICE_BAD[f"power-{_n}"] = prices(entry(extra=f'    power: {{w: {_w}, source: "https://x.example/tdp"}}\n'))
_PRICE_BAD.update({
    "unknown-key": prices(entry(extra="    msrp_usd: 5\n")),
    "unknown-point-key": prices(entry(street='{usd: 9, date: "2026", source: "https://x.example/a", tax: 1}')),
    "no-price-no-note": "prices:\n  - id: rtx-4090\n    segment: consumer\n",
    "empty-file": "",
    "empty-list": "prices: []\n",
    "null-list": "prices:\n",
    "mapping-list": "prices: {id: rtx-4090}\n",
    "top-list": "- id: rtx-4090\n  segment: consumer\n",
    "top-scalar": "42\n",
    "other-kind": "gpus: []\n",
    "two-kinds": prices(entry()) + "gpus: []\n",
    "extra-top-key": prices(entry()) + "extra: 1\n",
    "duplicate-key": prices(entry(extra="    segment: datacenter\n")),
    "duplicate-top-key": prices(entry()) + prices(entry(id_="rtx-3090")),
    "duplicate-id": prices(entry(), entry(street=point(usd="1"))),
    "bomb": _bomb("x: 1", "prices"),
    "recursive-alias": "prices: &p [*p]\n",
    "deep-nesting": "prices: " + "[" * 5000 + "]" * 5000 + "\n",
    "python-tag": "prices: !!python/object/apply:os.system [echo hi]\n",
    "latin1": b"prices:\n  - id: rtx-4090\n    segment: consumer\n    note: caf\xe9\n",
    "utf16": prices(entry()).encode("utf-16"),
    "nul-byte": prices(entry()).encode() + b"\x00",
    "binary": bytes(range(256)) * 64,
    "too-big": prices(entry(extra="    note: '" + "n" * (17 * 1024 * 1024) + "'\n")),
    "tab-indent": "prices:\n\t- id: rtx-4090\n",
    "two-documents": prices(entry()) + "---\n" + prices(entry()),
})
for _name, _content in _PRICE_BAD.items():
    add("buy-prices", _name, PBUY, BAD, files={"p.yaml": _content})
# text in a prices file: refused, or shown escaped and as text (machine names of unified machines are printed)
for _key, (_value, _shown) in HOSTILE_NAMES.items():
    _url = "https://shop.example/" + urllib.parse.quote(_value, safe="[]/")  # markup kept; a source is one URL
    _unified = ('  - id: m4-max-64gb\n    segment: apple\n    machine: ' + q(_value) + "\n    street: "
                + point(usd="1", date='"2026-11"', source=q(_url)) + "\n    note: "
                + q(_value) + "\n")
    add("buy-prices", f"machine-{_key}", ["buy", "--model", M1, "--segment", "apple", "--top", "3", "--prices",
                                          "{p.yaml}"],
        OK if _key in MARKUP else ANY, files={"p.yaml": prices(_unified)}, must=(_shown,) if _shown else (),
        must_not=FORGED)
    add("buy-prices", f"source-note-{_key}", [*PBUY, "--top", "3", "--segment", "consumer", "--max-gpus", "1"], ANY,
        files={"p.yaml": prices(entry(street=point(usd="1", source=q("https://shop.example/" + _value)),
                                      extra=f"    note: {q(_value)}\n"))}, must_not=FORGED)
# the same at 80 columns, where buy's table folds and drops columns (names are cut there: nothing required whole)
for _key, (_value, _shown) in HOSTILE_NAMES.items():
    _unified = ('  - id: m4-max-64gb\n    segment: apple\n    machine: ' + q(_value * 3) + "\n    street: "
                + point(usd="1") + "\n")
    add("buy-prices", f"narrow-machine-{_key}", ["buy", "--model", M1, "--segment", "apple", "--top", "3", "--prices",
                                                 "{p.yaml}"], OK if _key in MARKUP else ANY,
        files={"p.yaml": prices(_unified)}, must_not=FORGED, columns=80)
add("buy-prices", "ok-valid", [*PBUY, "--json"], OK, files={"p.yaml": prices(entry())})
# the smallest positive double as a price: tokens/s per 1,000 USD overflows to inf
add("buy-prices", "usd-denormal", [*PBUY, "--top", "2"], BAD,
    files={"p.yaml": prices(entry(street=point(usd="5.0e-324")))})
add("buy-prices", "usd-denormal-json", [*PBUY, "--json"], BAD,
    files={"p.yaml": prices(entry(street=point(usd="5.0e-324")))})
add("buy-prices", "ok-valid-terminal", PBUY, OK, files={"p.yaml": prices(entry(), entry(id_="rtx-3090"))})
add("buy-prices", "ok-cent", [*PBUY, "--json"], OK, files={"p.yaml": prices(entry(street=point(usd="0.01")))})
add("buy-prices", "ok-max-usd", [*PBUY, "--json"], OK, files={"p.yaml": prices(entry(street=point(usd="10000000")))})
add("buy-prices", "ok-note-only", [*PBUY, "--json"], OK,
    files={"p.yaml": "prices:\n  - id: rtx-4090\n    segment: consumer\n    note: none found\n"})
add("buy-prices", "ok-quarter-year", [*PBUY, "--used", "--json"], OK,
    files={"p.yaml": prices(entry(street=point(date='"2026-Q4"'), extra="    used: " + point(date='"2026"') + "\n"))})
add("buy-prices", "ok-future-date", [*PBUY, "--json"], ANY,
    files={"p.yaml": prices(entry(street=point(date='"9999-12-31"')))})
add("buy-prices", "many-entries", [*PBUY, "--top", "1"], ANY,
    files={"p.yaml": prices(*[entry(id_=f"x-{i}") for i in range(2_000)])})
add("buy-prices", "aliases-ok", [*PBUY, "--json"], OK,
    files={"p.yaml": "prices:\n  - &e {id: rtx-4090, segment: consumer, street: " + STREET + "}\n"
                     "  - {<<: *e, id: rtx-3090}\n"})

# --- serve-plan on one machine: every option ------------------------------------------------------------------------

_SP_BAD = {
    "ctx": ["-1", "-5", "abc", str(2**40), "nan", ""],
    "parallel": ["0", "-1", "257", "abc", str(10**20)],
    "prompt-tokens": ["0", "-1", str(10**12), "abc"],
    "output-tokens": ["0", "-3", str(10**12), ""],
    "rate": ["0", "-1", "nan", "inf", "-inf", "1e308", "1e7", "abc", ""],
    "engine": ["tensorrt", "", "[/]", "\x1b[2J", "vllm\u202e"],
    "quant": ["Q9_K", "[/]", "\x1b[31mq8_0", ""],
    "tensor-parallel-size": ["2", "0"],  # llama.cpp's plan has no tensor parallel size
    "pipeline-parallel-size": ["2", "0"],
}
for _opt, _values in _SP_BAD.items():
    for _n, _v in named(_values):
        add("serve-plan", f"{_opt}-{_n}", [*SP, f"--{_opt}", _v], BAD)
for _opt, _values in {"tensor-parallel-size": ["0", "-1", "65", "abc", "2"], "pipeline-parallel-size": ["0", "65"],
                      "parallel": ["0", "65537"], "quant": ["Q9_K", "q4_k_m"], "ctx": ["-1"],
                      "rate": ["nan"]}.items():
    for _n, _v in named(_values):
        add("serve-plan", f"vllm-{_opt}-{_n}", [*SP, "--engine", "vllm", f"--{_opt}", _v], BAD)
for _n, _m in named(["gemma-9-1b", "\x1b[2J", "[bold]x[/zz]", ""]):
    add("serve-plan", f"model-{_n}", ["serve-plan", "--gpu", "rtx-4090", "--model", _m], BAD)
add("serve-plan", "no-model", ["serve-plan", "--gpu", "rtx-4090"], BAD)
add("serve-plan", "no-hardware", ["serve-plan", "--model", M1], BAD)
add("serve-plan", "gpu-unknown", ["serve-plan", "--gpu", "\x1b]0;x\x07", "--model", M1], BAD)
add("serve-plan", "gpu-markup", ["serve-plan", "--gpu", "[/]", "--model", M1], BAD)
add("serve-plan", "hardware-missing", ["serve-plan", "--hardware", "/nonexistent.yaml", "--model", M1], BAD)
add("serve-plan", "hardware-dev-zero", ["serve-plan", "--hardware", "/dev/zero", "--model", M1], BAD)
add("serve-plan", "hardware-fifo", ["serve-plan", "--hardware", "{c.yaml}", "--model", M1], BAD,
    files={"c.yaml": FIFO})
add("serve-plan", "ok-ctx-0", [*SP, "--ctx", "0"], OK)
add("serve-plan", "ok-rate-tiny-json", [*SP, "--rate", "1e-300", "--json"], OK)
add("serve-plan", "ok-rate-max-json", [*SP, "--rate", "1e6", "--json"], OK)
add("serve-plan", "ok-rate-max-terminal", [*SP, "--rate", "1e6"], OK)
add("serve-plan", "ok-parallel-256-rate", [*SP, "--parallel", "256", "--rate", "1000", "--json"], OK)
add("serve-plan", "ok-rate-27b", ["serve-plan", "--gpu", "rtx-3060-12gb", "--model", "27b", "--rate", "50"], OK)
add("serve-plan", "huge-prompt-json", [*SP, "--prompt-tokens", "16777216", "--json"], ANY)
add("serve-plan", "huge-output-json", [*SP, "--output-tokens", "16777216", "--json"], ANY)
add("serve-plan", "huge-both", [*SP, "--parallel", "256", "--prompt-tokens", "16777216", "--output-tokens",
                                "16777216"], ANY)
# a context smaller than one request (512 + 256 tokens): refused, or a no-go; never a plan that "fits"
add("serve-plan", "ctx-below-request", [*SP, "--ctx", "5"], ANY, must_not=("GO gemma", "TIGHT gemma"))
add("serve-plan", "ctx-below-request-json", [*SP, "--ctx", "300", "--json"], ANY,
    must_not=('"verdict": "go"', '"verdict": "tight"'))
add("serve-plan", "ok-vllm-65536-json", [*SP, "--engine", "vllm", "--parallel", "65536", "--json"], OK)
add("serve-plan", "ok-vllm-parallel-1024", [*SP, "--engine", "vllm", "--parallel", "1024"], OK)
add("serve-plan", "ok-vllm-rate-tiny", [*SP, "--engine", "vllm", "--rate", "1e-300", "--json"], OK)
add("serve-plan", "ok-vllm-rate-max", [*SP, "--engine", "vllm", "--rate", "1e6"], OK)
add("serve-plan", "vllm-tp-64", [*SP, "--engine", "vllm", "--tensor-parallel-size", "64"], BAD)
add("serve-plan", "ok-ollama", [*SP, "--engine", "ollama", "--json"], OK)
add("serve-plan", "ok-transformers", [*SP, "--engine", "transformers", "--rate", "1e6"], OK)

# --- serve-plan --hardware cluster.yaml (llama.cpp RPC and vLLM on Ray) ---------------------------------------------

NET = "{bandwidth_gbit: 10, latency_us: 50}"


def node(name: str = "n", host: str = "192.168.1.10", gpus: str = "[rtx-3090, rtx-3090]", extra: str = "") -> str:
    return f"{{name: {name}, host: {host}, gpus: {gpus}{extra}}}"


HEAD, WORKER = node("head", "192.168.1.10"), node("worker1", "192.168.1.11")


def cluster(name: str = "lab", net: str = NET, nodes: list[str] | str | None = None, extra: str = "") -> str:
    nodes = [HEAD, WORKER] if nodes is None else nodes
    body = nodes if isinstance(nodes, str) else "\n" + "".join(f"  - {n}\n" for n in nodes)
    return f"name: {name}\nnetwork: {net}\nnodes: {body.rstrip()}\n{extra}"


def many_nodes(n: int, gpus: str = "[rtx-3090]") -> str:
    return cluster(nodes=[node(f"n{i}", f"10.0.{i // 250}.{i % 250 + 1}", gpus) for i in range(n)])


def add_cluster(name: str, text: str | bytes, expect: str, vllm: str | None = None, extra: tuple[str, ...] = (),
                model: str = M1, **kw: Any) -> None:
    """One cluster file under both engines (`vllm` overrides the expectation under --engine vllm)."""
    xfail_rpc = kw.pop("xfail_rpc", None)
    xfail_vllm = kw.pop("xfail_vllm", None)
    must_vllm = kw.pop("must_vllm", ())
    # vLLM's planner keeps the fastest layout, one node for a small model: a case about the other nodes' names and
    # hosts asks for a layout past the head's two GPUs
    extra_vllm = ("--tensor-parallel-size", "1", "--pipeline-parallel-size", "3") if kw.pop("two_nodes", False) else ()
    base = ["serve-plan", "--hardware", "{c.yaml}", "--model", model, *extra]
    add("cluster-rpc", name, base, expect, files={"c.yaml": text}, xfail=xfail_rpc, **kw)
    add("cluster-vllm", name, [*base, "--engine", "vllm", *extra_vllm], vllm or expect, files={"c.yaml": text},
        xfail=xfail_vllm, must=kw.pop("must", ()) + tuple(must_vllm), **kw)


for _key, (_value, _shown) in HOSTILE_NAMES.items():
    _must = (_shown,) if _shown else ()
    _exp = OK if _key in MARKUP else ANY
    add_cluster(f"cluster-name-{_key}", cluster(name=q(_value)), _exp, must=_must, must_not=FORGED)
    add_cluster(f"node-name-{_key}", cluster(nodes=[node(q(_value), "192.168.1.10"), WORKER]), _exp, must=_must,
                must_not=FORGED)
    add_cluster(f"worker-name-{_key}", cluster(nodes=[HEAD, node(q(_value), "192.168.1.11")]), _exp, must=_must,
                must_not=FORGED, two_nodes=True)
    add_cluster(f"host-{_key}", cluster(nodes=[HEAD, node("w", q(_value))]), BAD)
    add_cluster(f"gpu-id-{_key}", cluster(nodes=[HEAD, node("w", "192.168.1.11", f"[{q(_value)}]")]), BAD)
add_cluster("json-names", cluster(name=q("\x1b[2J[/]\u202e"), nodes=[node(q("[bold]\x1b"), "192.168.1.10"), WORKER]),
            ANY, extra=("--json",))
for _n, _host in named(['"a b"', '"1.2.3.4:50052"', '"http://h.example"', '""', q("h" * 254), '"-x"',
                            '"x..y"', '"h\u00f4st"', "123", "null", '"[fe80::1]"', '"192.168.1.11/24"',
                            '"host_name"', '"*.example"', '"fe80::1::2"']):
    add_cluster(f"host-bad-{_n}", cluster(nodes=[HEAD, node("w", _host)]), BAD)
add_cluster("host-duplicate", cluster(nodes=[HEAD, node("w", "192.168.1.10")]), BAD)
add_cluster("host-duplicate-case", cluster(nodes=[node("a", "box-a.lan"), node("b", "BOX-A.lan")]), BAD)
add_cluster("host-duplicate-dot", cluster(nodes=[node("a", "box-a.lan"), node("b", '"box-a.lan."')]), BAD)
add_cluster("host-duplicate-v6", cluster(nodes=[node("a", '"2001:db8::1"'), node("b", '"2001:DB8:0::1"')]), BAD)
# IPv6: llama.cpp's RPC transport is IPv4 only; Ray takes [v6]:port
add_cluster("ipv6-worker", cluster(nodes=[HEAD, node("w", '"fe80::1"')]), BAD, vllm=OK,
            must_not=("fe80::1:50052", "fe80::1:6379"))
add_cluster("ipv6-worker-global", cluster(nodes=[HEAD, node("w", '"2001:db8::2"')]), BAD, vllm=OK,
            must_not=("2001:db8::2:",))
add_cluster("ipv6-head", cluster(nodes=[node("h", '"fe80::1"'), WORKER]), ANY, vllm=OK,
            must_vllm=("ray start --address '[fe80::1]:6379'",), must_not=("fe80::1:6379", " fe80::1:"), two_nodes=True)
add_cluster("ipv6-head-upper", cluster(nodes=[node("h", '"2001:DB8::1"'), WORKER]), ANY, vllm=OK,
            must_vllm=("[2001:db8::1]:6379",), must_not=("2001:db8::1:6379", "2001:DB8::1:6379"), two_nodes=True)
add_cluster("ipv6-both", cluster(nodes=[node("h", '"2001:db8::1"'), node("w", '"2001:db8::2"')]), BAD, vllm=OK,
            must_vllm=("[2001:db8::1]:6379",), must_not=("2001:db8::1:6379", "2001:db8::2:50052"), two_nodes=True)
add_cluster("ipv6-loopback-head", cluster(nodes=[node("h", '"::1"'), WORKER]), ANY, vllm=OK,
            must_vllm=("[::1]:6379",), must_not=(" ::1:6379",), two_nodes=True)
add_cluster("ipv6-scoped-head", cluster(nodes=[node("h", '"fe80::1%eth0"'), WORKER]), ANY,
            must_not=("fe80::1%eth0:6379",))
add_cluster("ipv6-scoped-worker", cluster(nodes=[HEAD, node("w", '"fe80::2%eth0"')]), BAD, vllm=ANY,
            must_not=("fe80::2%eth0:50052",))
add_cluster("ipv4-mapped-worker", cluster(nodes=[HEAD, node("w", '"::ffff:192.168.1.12"')]), ANY,
            must_not=("::ffff:192.168.1.12:50052",))
add_cluster("ipv6-64-nodes", cluster(nodes=[node("h", '"2001:db8::1"')] +
                                     [node(f"w{i}", q(f"2001:db8::{i + 2:x}"), "[rtx-3090]") for i in range(63)]),
            BAD, vllm=ANY, must_vllm=("[2001:db8::1]:6379",), two_nodes=True)
add_cluster("ipv6-16-nodes", cluster(nodes=[node("h", '"2001:db8::1"')] +
                                     [node(f"w{i}", q(f"2001:db8::{i + 2:x}"), "[rtx-3090]") for i in range(15)]),
            BAD, vllm=OK, must_vllm=("'[2001:db8::1]:6379'",), two_nodes=True)
# numbers in every numeric field
_NUM_BAD = ["true", "false", '"10"', "-1", "1.0e-300", "1e-300", "1.0e+308", "1e308", ".nan", ".inf", "-.inf",
            "null", "[10]", "{a: 1}"]
for _n, _v in named([*_NUM_BAD, "0", "0.0001", "100001"]):
    add_cluster(f"bandwidth-{_n}", cluster(net=f"{{bandwidth_gbit: {_v}, latency_us: 50}}"), BAD)
for _n, _v in named([*[v for v in _NUM_BAD if v != "1.0e-300"], "10000001"]):
    add_cluster(f"latency-{_n}", cluster(net=f"{{bandwidth_gbit: 10, latency_us: {_v}}}"), BAD)
for _n, _v in named([*[v for v in _NUM_BAD if v != "null"], "0", "0.1", "65537"]):  # null: not given
    add_cluster(f"ram-{_n}", cluster(nodes=[HEAD, node("w", "192.168.1.11", extra=f", ram_gb: {_v}")]), BAD)
add_cluster("ok-bandwidth-min-json", cluster(net="{bandwidth_gbit: 0.001, latency_us: 0}"), OK, extra=("--json",))
add_cluster("ok-bandwidth-max-json", cluster(net="{bandwidth_gbit: 100000, latency_us: 0}"), OK,
            extra=("--json", "--rate", "1e6"))
add_cluster("ok-latency-tiny-json", cluster(net="{bandwidth_gbit: 10, latency_us: 1.0e-300}"), OK,
            extra=("--json", "--rate", "1e-300"))
add_cluster("ok-latency-max-json", cluster(net="{bandwidth_gbit: 0.001, latency_us: 10000000}"), OK,
            extra=("--json", "--rate", "1e6", "--parallel", "256"))
add_cluster("latency-negative-zero", cluster(net="{bandwidth_gbit: 10, latency_us: -0.0}"), ANY,
            must_not=("-0 us",))
add_cluster("ok-ram-min", cluster(nodes=[HEAD, node("w", "192.168.1.11", extra=", ram_gb: 0.25")]), OK)
# structure
_CLUSTER_BAD: dict[str, str | bytes] = {
    "nodes-empty": cluster(nodes="[]"),
    "nodes-null": cluster(nodes=""),
    "nodes-mapping": cluster(nodes="{a: 1}"),
    "nodes-string": cluster(nodes="head"),
    "no-network": f"name: x\nnodes: [{HEAD}]\n",
    "network-null": cluster(net="null"),
    "network-string": cluster(net='"10G"'),
    "network-extra-key": cluster(net="{bandwidth_gbit: 10, latency_us: 5, mtu: 9000}"),
    "network-list": cluster(net="[10, 50]"),
    "node-extra-key": cluster(nodes=[HEAD, node("w", "192.168.1.11", extra=", port: 50052")]),
    "top-extra-key": cluster(extra="extra: 1\n"),
    "name-number": cluster(name="123"),
    "name-null": cluster(name="null"),
    "name-list": cluster(name="[a, b]"),
    "name-too-long": cluster(name="n" * 201),
    "node-name-empty": cluster(nodes=[node('""', "192.168.1.10"), WORKER]),
    "node-name-long": cluster(nodes=[node("n" * 101, "192.168.1.10"), WORKER]),
    "node-name-number": cluster(nodes=[node("7", "192.168.1.10"), WORKER]),
    "gpus-empty": cluster(nodes=[HEAD, node("w", "192.168.1.11", "[]")]),
    "gpus-string": cluster(nodes=[HEAD, node("w", "192.168.1.11", "rtx-3090")]),
    "gpus-number": cluster(nodes=[HEAD, node("w", "192.168.1.11", "[3090]")]),
    "gpus-null-item": cluster(nodes=[HEAD, node("w", "192.168.1.11", "[null]")]),
    "gpus-unknown": cluster(nodes=[HEAD, node("w", "192.168.1.11", "[rtx-9999]")]),
    "gpus-17": cluster(nodes=[HEAD, node("w", "192.168.1.11", "[" + ",".join(["rtx-3090"] * 17) + "]")]),
    "gpus-mapping": cluster(nodes=[HEAD, node("w", "192.168.1.11", "[{gpu: rtx-3090, count: 2}]")]),
    "nodes-65": many_nodes(65),
    "nodes-1000": many_nodes(1000),
    "duplicate-key": cluster(extra="name: again\n"),
    "duplicate-node-key": cluster(nodes=[HEAD, "{name: w, name: v, host: 192.168.1.11, gpus: [rtx-3090]}"]),
    "bomb": _bomb("network: " + NET + f"\nnodes: [{HEAD}]", "name"),
    "bomb-gpus": _bomb("network: " + NET, "x") + "nodes: [{name: h, host: h1, gpus: *a9}]\n",
    "recursive-alias": "network: " + NET + "\nnodes: &n [*n]\n",
    "deep-nesting": "network: " + NET + "\nnodes: " + "[" * 5000 + "]" * 5000 + "\n",
    "too-big": cluster(extra="# " + "x" * (300 * 1024) + "\n"),
    "too-big-name": cluster(name=q("n" * (300 * 1024))),
    "python-tag": "name: !!python/object/apply:os.system [echo hi]\nnetwork: " + NET + f"\nnodes: [{HEAD}]\n",
    "latin1": b"name: caf\xe9\nnetwork: {bandwidth_gbit: 10, latency_us: 5}\nnodes: [{name: a, host: h, gpus: [t4]}]\n",
    "utf16": cluster().encode("utf-16"),
    "nul-byte": cluster().encode() + b"\x00",
    "two-documents": cluster() + "---\n" + cluster(),
    "top-list": f"- {HEAD}\n",
    "empty-file": "",
}
for _name, _content in _CLUSTER_BAD.items():
    add_cluster(_name, _content, BAD)
# sizes: 64 nodes is the limit (llama.cpp RPC servers, vLLM stages)
# (more pipeline stages than the model has layers: refused in one line, or planned with fewer stages)
add_cluster("nodes-64", many_nodes(64), ANY, extra=("--json",))
add_cluster("nodes-64-terminal", many_nodes(64), ANY)
add_cluster("nodes-64x2", many_nodes(64, "[rtx-3090, rtx-3090]"), ANY)
add_cluster("nodes-64x16-27b", many_nodes(64, "[" + ",".join(["h100-sxm"] * 16) + "]"), ANY, model="gemma-3-27b")
add_cluster("nodes-64-pp-2", many_nodes(64), ANY, extra=("--pipeline-parallel-size", "2"))
add_cluster("nodes-27-27b", many_nodes(27, "[rtx-3090]"), ANY, model="gemma-3-27b")
add_cluster("mi250x", cluster(nodes=[node("h", "10.0.0.1", "[mi250x]"), node("w", "10.0.0.2", "[rtx-3090]")]), OK)
add_cluster("nodes-1-27b", cluster(nodes=[HEAD]), OK, model="gemma-3-27b", extra=("--rate", "5"))
add_cluster("mixed-vendors", cluster(nodes=[node("h", "10.0.0.1", "[rtx-3090, mi250x]"),
                                            node("w", "10.0.0.2", "[m4-max-64gb]")]), ANY)
add_cluster("mi250x-x9", cluster(nodes=[HEAD, node("w", "10.0.0.2", "[" + ",".join(["mi250x"] * 9) + "]")]), ANY)
add_cluster("aliases-ok", "name: lab\nnetwork: " + NET + "\nnodes:\n  - &n {name: a, host: 10.0.0.1, gpus: [t4]}\n"
            "  - {<<: *n, name: b, host: 10.0.0.2}\n", OK)
# the serve options on a cluster
add_cluster("opt-ctx-neg", cluster(), BAD, extra=("--ctx", "-1"))
add_cluster("opt-parallel-0", cluster(), BAD, extra=("--parallel", "0"))
add_cluster("opt-rate-nan", cluster(), BAD, extra=("--rate", "nan"))
add_cluster("opt-prompt-0", cluster(), BAD, extra=("--prompt-tokens", "0"))
add_cluster("opt-quant-q9", cluster(), BAD, extra=("--quant", "Q9_K"))
add_cluster("opt-tp-3", cluster(), BAD, extra=("--tensor-parallel-size", "3"))
# vLLM takes a tensor-parallel group across nodes, and any number of stages up to the GPUs (Ray places the ranks)
add_cluster("opt-tp-4", cluster(), BAD, vllm=OK, extra=("--tensor-parallel-size", "4"))
add_cluster("opt-pp-3", cluster(), BAD, vllm=OK, extra=("--pipeline-parallel-size", "3"))
add_cluster("opt-tp-64-pp-64", cluster(), BAD, extra=("--tensor-parallel-size", "64", "--pipeline-parallel-size", "64"))
add_cluster("opt-tp-2-pp-2", cluster(), BAD, vllm=OK, extra=("--tensor-parallel-size", "2", "--pipeline-parallel-size",
                                                             "2"))
add_cluster("opt-parallel-max-rate", cluster(), OK, extra=("--parallel", "256", "--rate", "1e6", "--json"))
add_cluster("opt-huge-prompt", cluster(), ANY, extra=("--prompt-tokens", "16777216", "--json"))
add_cluster("opt-gpu-too", cluster(), ANY, extra=("--gpu", "rtx-4090"))
# a cluster file is not a machine: the other commands refuse it in one line
for _argv in (["check", "--model", M1], ["recommend"], ["report", "--model", M1]):
    add("cluster-elsewhere", _argv[0], [*_argv, "--hardware", "{c.yaml}"], BAD, files={"c.yaml": cluster()})
add("cluster-elsewhere", "serve-engine-ollama", ["serve-plan", "--hardware", "{c.yaml}", "--model", M1, "--engine",
                                                  "ollama"], BAD, files={"c.yaml": cluster()})
add("cluster-elsewhere", "serve-engine-transformers", ["serve-plan", "--hardware", "{c.yaml}", "--model", M1,
                                                        "--engine", "transformers"], BAD, files={"c.yaml": cluster()})

# --- machine files on check, recommend and report -------------------------------------------------------------------


def machine(name: str = "box", gpus: str = "[rtx-4090]", extra: str = "ram_gb: 64\n") -> str:
    return f"name: {name}\ngpus: {gpus}\n{extra}"


SPEC = {"id": "custom-card", "name": "Custom card", "vendor": "nvidia", "arch": "ampere", "backend": "cuda",
        "memory_bytes": 17179869184, "usable_memory_bytes": 17179869184, "unified_memory": False,
        "memory_type": "GDDR6", "memory_bandwidth_gbps": 500, "fp16_tensor_tflops": 100, "bf16_supported": True,
        "ecc": False, "form_factor": "card"}


def spec(**changes: Any) -> str:
    """A full GPU spec in flow style, with `changes` (values as YAML text) replacing fields."""
    fields = {k: json.dumps(v) for k, v in SPEC.items()}
    fields.update(changes)
    return "{" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}"


MCMDS = {"check": ["check", "--hardware", "{m.yaml}", "--model", M1],
         "report": ["report", "--hardware", "{m.yaml}", "--model", M1],
         "recommend": ["recommend", "--hardware", "{m.yaml}", "--top", "1"]}


def add_machine(name: str, text: str | bytes, expect: str, commands: tuple[str, ...] = ("check", "report", "recommend"),
                xfail: dict[str, str] | None = None, **kw: Any) -> None:
    for cmd in commands:
        add(f"machine-{cmd}", name, MCMDS[cmd], expect, files={"m.yaml": text}, xfail=(xfail or {}).get(cmd), **kw)


for _key, (_value, _shown) in HOSTILE_NAMES.items():
    _must = (_shown,) if _shown else ()
    _markup = _key in MARKUP
    add_machine(f"name-{_key}", machine(name=q(_value)), OK if _markup else ANY, must=_must, must_not=FORGED,
                commands=("check", "report", "recommend") if _markup or _key in ("bidi-rlo", "c1-csi") else
                ("check", "report"))
    add_machine(f"gpu-id-{_key}", machine(gpus=f"[{q(_value)}]"), BAD, commands=("check", "report"))
    add_machine(f"spec-name-{_key}", machine(gpus=f"[{spec(name=q(_value))}]"), OK if _markup else ANY, must=_must,
                must_not=FORGED, commands=("check",))
    add_machine(f"spec-name-{_key}", machine(gpus=f"[{spec(name=q(_value))}]"), OK if _markup else ANY,
                must_not=FORGED, commands=("report",))  # report names the machine, not its GPUs
    add_machine(f"cpu-{_key}", machine(extra=f"ram_gb: 64\ncpu: {q(_value)}\n"), BAD, commands=("check",))
    add_machine(f"disk-{_key}", machine(extra=f"ram_gb: 64\ndisk: {q(_value)}\n"), BAD, commands=("check",))
for _cmd in ("check", "report"):
    add(f"machine-{_cmd}", "spec-tflops-denormal-json", [*MCMDS[_cmd], "--json"], BAD,
        files={"m.yaml": machine(gpus=f"[{spec(fp16_tensor_tflops='5.0e-324')}]")})
for _key in ("markup-close", "bidi-rlo", "c1-csi"):
    add("machine-recommend", f"narrow-name-{_key}", MCMDS["recommend"], ANY, columns=40, must_not=FORGED,
        files={"m.yaml": machine(name=q(HOSTILE_NAMES[_key][0] * 4))})
add_machine("spec-id-markup", machine(gpus=f"[{spec(id=q('[/]'))}]"), BAD, commands=("check", "report"))
add_machine("notes-hostile", machine(extra="ram_gb: 64\nnotes: " + q("\x1b[2J[/]\u202e\nFAKE") + "\n"), OK,
            commands=("check", "report"), must_not=FORGED)
# numbers in every numeric field of a machine file
_MACHINE_NUM = {
    "ram_gb": ["true", '"64"', "-1", "0", "0.1", "1.0e-300", "1e-300", "1.0e+308", ".nan", ".inf", "65537", "[64]"],
    "ram_speed_mts": ["0", "-1", "1000000000", "true", '"5600"', "5600.5", ".nan"],
    "ram_channels": ["0", "25", "1000000000", "0.5", "true", ".inf"],
}
for _field, _values in _MACHINE_NUM.items():
    for _n, _v in named(_values):
        _extra = f"{_field}: {_v}\n" if _field == "ram_gb" else f"ram_gb: 64\nram_type: DDR5\n{_field}: {_v}\n"
        add_machine(f"{_field}-{_n}", machine(extra=_extra), BAD)
_SLOT_NUM = {"count": ["0", "-1", "17", "1000000000", "true", "2.0", ".nan"],
             "pcie_gen": ["0", "7", "-1", "true", "4.0", ".inf"],
             "pcie_lanes": ["0", "3", "32", "true", "16.0"],
             "nvlink": ['"yes"', "1", "[true]"]}
for _field, _values in _SLOT_NUM.items():
    for _n, _v in named(_values):
        add_machine(f"slot-{_field}-{_n}", machine(gpus=f"[{{gpu: rtx-4090, {_field}: {_v}}}]"), BAD,
                    commands=("check", "report"))
_SPEC_NUM = {
    "memory_bytes": ["0", "-1", "true", '"17179869184"', "1.0e+308", "18446744073709551616", "1.5e10", ".nan"],
    "usable_memory_bytes": ["34359738368", "0"],
    "memory_bandwidth_gbps": ["1.0e-300", "0", ".nan", ".inf", "1.0e+308", "true", '"500"'],
    "fp16_tensor_tflops": ["1.0e-300", "0", "-1", ".nan", ".inf", "1.0e+308", "true"],
    "int8_tensor_tops": ["1.0e-300", ".nan"],
    "fp32_tflops": ["1.0e-300", ".inf"],
    "memory_data_rate_gbps": ["1.0e-300", "-1"],
    "bus_width_bits": ["0", "1.0e+308", "true"],
    "boost_clock_mhz": [".nan", "0", "1.0e+308"],
    "tdp_w": ["0", "-1", ".inf"],
    "nvlink_gbps": ["-1", ".nan", "1.0e+308"],
    "pcie_gen": ["0", "7", "true"],
    "logical_devices": ["0", "9", "true"],
    "gpu_cores": ["0", "1025"],
}
for _field, _values in _SPEC_NUM.items():
    for _n, _v in named(_values):
        add_machine(f"spec-{_field}-{_n}", machine(gpus=f"[{spec(**{_field: _v})}]"), BAD, commands=("check", "report"))
_MACHINE_BAD: dict[str, str | bytes] = {
    "ram-type-unknown": machine(extra="ram_gb: 64\nram_type: DDR9\n"),
    "ram-type-markup": machine(extra="ram_gb: 64\nram_type: '[/]'\n"),
    "cpu-unknown": machine(extra="ram_gb: 64\ncpu: No Such CPU 9000\n"),
    "gpus-unknown": machine(gpus="[rtx-9999]"),
    "gpus-17": machine(gpus="[" + ",".join(["rtx-4090"] * 17) + "]"),
    "gpus-string": machine(gpus="rtx-4090"),
    "nodes-key": machine(extra="ram_gb: 64\nnodes: []\n"),
    "no-capacity": "name: box\n",
    "unknown-key": machine(extra="ram_gb: 64\nram_gigs: 64\n"),
    "duplicate-key": machine(extra="ram_gb: 64\nram_gb: 8\n"),
    "bomb": _bomb("name: x\nram_gb: 64", "gpus"),
    "recursive-alias": "name: x\nram_gb: 4\ngpus: &g [*g]\n",
    "deep-nesting": "name: x\ngpus: " + "[" * 5000 + "]" * 5000 + "\n",
    "too-big": machine(extra="ram_gb: 64\nnotes: '" + "a" * (1024 * 1024 + 10) + "'\n"),
    "top-list": "- rtx-4090\n",
    "top-scalar": "rtx-4090\n",
    "empty-file": "",
    "binary": bytes(range(256)) * 8,
    "latin1": b"name: caf\xe9\ngpus: [a4000]\n",
    "two-documents": machine() + "---\n" + machine(),
}
for _name, _content in _MACHINE_BAD.items():
    add_machine(_name, _content, BAD)
add_machine("ok-plain", machine(), OK, commands=("check", "report"))
for _cmd in ("check", "report"):
    add(f"machine-{_cmd}", "ok-json-hostile-name", [*MCMDS[_cmd], "--json"], OK,
        files={"m.yaml": machine(name=q("[/] \u202e"), gpus=f"[{spec(name=q('[bold]x'))}]")})
add_machine("ok-ram-only", "name: cpu box\nram_gb: 0.25\n", OK, commands=("check", "report"))
add_machine("ok-16-gpus", machine(gpus="[{gpu: rtx-4090, count: 16, pcie_lanes: 1, pcie_gen: 1}]"), OK,
            commands=("check", "report"))
add_machine("ok-spec-bounds", machine(gpus=f"[{spec(memory_bandwidth_gbps='10', fp16_tensor_tflops='0.001')}]"), OK,
            commands=("check", "report"))
add("machine-check", "flags-override-ram-nan", [*MCMDS["check"], "--ram", "nan"], BAD, files={"m.yaml": machine()})
add("machine-check", "flags-reserve-huge", [*MCMDS["check"], "--reserve", "1e308"], BAD, files={"m.yaml": machine()})
add("machine-check", "with-gpu-too", [*MCMDS["check"], "--gpu", "rtx-3090"], ANY, files={"m.yaml": machine()})
add("machine-check", "fifo", MCMDS["check"], BAD, files={"m.yaml": FIFO})
add("machine-report", "fifo", MCMDS["report"], BAD, files={"m.yaml": FIFO})

# --- -ot / --override-tensor on check and report --------------------------------------------------------------------

_OT_BAD = {
    "conditional": "(x)?(?(1)|(.+)+#)=CPU",
    "py-named-group": "(?P<n>blk)=CPU",
    "es-named-group": "(?<n>blk)=CPU",
    "py-named-backref": "(?P<n>b)(?P=n)=CPU",
    "lookbehind": "(?<=blk)\\.0=CPU",
    "neg-lookbehind": "(?<!x)blk=CPU",
    "inline-flag": "(?i)BLK=CPU",
    "inline-flag-group": "(?s:.)=CPU",
    "verbose-flag": "(?x)blk=CPU",
    "comment-group": "(?#c)blk=CPU",
    "atomic-group": "(?>blk)=CPU",
    "possessive": "blk.*+=CPU",
    "unbalanced-open": "blk(=CPU",
    "unbalanced-close": "blk)=CPU",
    "open-class": "[blk=CPU",
    "nothing-to-repeat": "*blk=CPU",
    "double-star": "a**=CPU",
    "bad-range": "a{2,1}=CPU",
    "class-range-reversed": "[z-a]=CPU",
    "huge-count": "a{99999999}=CPU",
    "count-overflow": "a{" + "9" * 40 + "}=CPU",
    "backref-missing": "\\2(a)=CPU",
    "trailing-backslash": "blk\\=CPU",
    "empty-buffer": "blk=",
    "unknown-buffer": "blk=NOSUCH",
    "cuda1-one-gpu": "blk=CUDA1",
    "buffer-ansi": "blk=CUDA0\x1b[2J",
    "buffer-markup": "blk=[/]",
    "no-equals": "blk",
    "comma-in-count": "blk\\.\\d{1,3}\\.=CPU",
    "too-many": ",".join(["blk\\.0\\.=CPU"] * 4097),
    "lookahead-has-equals": "(?=blk)blk\\.1\\.=CPU",  # llama.cpp splits at the first '=', as gemma-fit does
    "ansi-unclosed-class": "\x1b[2J=CPU",
}
_OT_ANY = {
    "catastrophic-nested": "(a+)+$=CPU",
    "catastrophic-backref": "(.*)(.*)(.*)\\1\\2\\3x=CPU",
    "catastrophic-xx": "(x+x+)+y=CPU",
    "catastrophic-dotstar": "(.*a){20}=CPU",
    "catastrophic-email": "^(([a-z])+.)+[A-Z]([a-z])+$=CPU",
    "backref-star": "(.*)*\\1x=CPU",
    "backref-nested": "((.*)*)*\\2x=CPU",
    "backref-many": "(.)(.)(.)(.)(.)(.)(.)(.)(.)\\9\\8\\7\\6\\5\\4\\3\\2\\1=CPU",
    "backref-repeat": "(\\w+\\.)+\\1{50}z=CPU",
    "alternation-blowup": "(blk|blk\\.|b|bl)*\\.z=CPU",
    "huge-literal": "a" * 100_000 + "=CPU",
    "huge-class": "[" + "a-z" * 30_000 + "]=CPU",
    "huge-alternation": "|".join(["blk"] * 30_000) + "=CPU",
    "deep-groups": "(" * 5000 + "a" + ")" * 5000 + "=CPU",
    "deep-noncapture": "(?:" * 3000 + "a" + ")" * 3000 + "=CPU",
    "deep-lookahead": "(?=" * 3000 + "a" + ")" * 3000 + "=CPU",
    "big-count": "x{1,100000}=CPU",
    "nested-counts": "((a{1,100}){1,100}){1,100}=CPU",
    "empty-pattern": "=CPU",
    "trailing-comma": "blk=CPU,",
    "many-4096": ",".join(["blk\\.0\\.=CPU"] * 4096),
    "forward-backref": "\\1(a)=CPU",
    "escape-A": "\\Ablk=CPU",
    "escape-z": "blk\\z=CPU",
    "nul-escape": "blk\\0=CPU",
}
_OT_OK = {
    "ffn-cpu": "blk\\.[0-9]+\\.ffn_.*=CPU",
    "token-embd": "token_embd=CPU",
    "neg-lookahead": "(?!x)blk=CPU",
    "word-boundary": "\\bblk\\b=CPU",
    "alt-cuda0": "blk\\.(1|2)\\.attn.*=CUDA0",
    "unicode-escape": "\\u0062lk=CPU",
    "markup-class": "[/]=CPU",
    "markup-bold-class": "[bold]x[/bold]=CPU",
    "ansi-literal": "\x1b\\[2J=CPU",
    "bidi-literal": "\u202eblk=CPU",
    "two-rules": "blk\\.1\\.=CPU,blk\\.2\\.=CUDA0",
}
for _name, _pat in _OT_BAD.items():
    for _cmd, _base in (("check", CHK), ("report", REP)):
        add(f"ot-{_cmd}", _name, [*_base, "-ot", _pat], BAD)
for _name, _pat in _OT_ANY.items():
    for _cmd, _base in (("check", CHK), ("report", REP)):
        add(f"ot-{_cmd}", _name, [*_base, "-ot", _pat], ANY)
for _name, _pat in _OT_OK.items():
    _must = (_pat.split("=")[0],) if "[" in _pat and "\x1b" not in _pat else ()
    for _cmd, _base in (("check", CHK), ("report", REP)):
        add(f"ot-{_cmd}", _name, [*_base, "-ot", _pat], OK, must=_must if _cmd == "check" else ())
add("ot-check", "json-catastrophic", [*CHK, "-ot", "(.*)(.*)(.*)\\1\\2\\3x=CPU", "--json"], ANY)
add("ot-check", "json-markup", [*CHK, "-ot", "[/]\u202e=CPU", "--json"], OK)
add("ot-check", "repeated-flag-5000", [*CHK, *["-ot", "blk\\.0\\.=CPU"] * 5000], BAD)
add("ot-check", "moe-with-backref", ["check", "--gpu", "rtx-4090", "--model", "gemma-4-26b-a4b", "-ot",
                                     "(blk\\.)(\\d+)\\.ffn_.*_exps.*\\1=CPU"], ANY)
add("ot-check", "moe-catastrophic", ["check", "--gpu", "rtx-4090", "--model", "gemma-4-26b-a4b", "-ot",
                                     "(.*)(.*)(.*)(.*)\\1\\2\\3\\4x=CPU"], ANY)
add("ot-check", "cpu-only", ["check", "--gpu", "cpu", "--ram", "64", "--model", M1, "-ot", "blk=CUDA0"], BAD)

# --- found by the session-40 corpus (cost, prices, machines, synth): each was exit 0 with a wrong answer or exit 1 ---
COST = ["cost", "--model", "gemma-3-27b", "--gpu", "rtx-4090"]
add("cost", "hours-below-a-minute", [*COST, "--tokens-per-day", "1M", "--hours-per-day", "5e-324"], BAD)
add("cost", "hours-one", [*COST, "--tokens-per-day", "1M", "--hours-per-day", "1", "--json"], OK,
    must=('"machines": 6',))  # 47 tok/s a rented 4090 makes 0.17M in an hour: six of them for 1M
add("cost", "volume-arabic-digits", [*COST, "--tokens-per-day", "\u0661\u0660\u0660\u0660"], BAD)
add("cost", "volume-fullwidth-digits", [*COST, "--tokens-per-day", "\uff11\uff10\uff10\uff10"], BAD)
add("check", "ctx-arabic-digits", [*CHK, "--ctx", "\u0668k"], BAD)
add("cost", "prompt-past-any-context", [*COST, "--tokens-per-day", "1M", "--prompt-tokens", "16777216"], BAD)
add("cost", "prompt-past-trained-context", [*COST, "--tokens-per-day", "1M", "--prompt-tokens", "300000"], BAD)
for _name, _source in {"javascript": "javascript:alert(1)", "data": "data:text/html,x", "file": "file:///etc/passwd",
                       "space": "https://shop.example/a b"}.items():  # text naming no scheme is a source too
    _p = prices(f"  - id: rtx-4090\n    segment: consumer\n    street: {point(source=q(_source))}\n")
    add("cost", f"prices-source-{_name}", [*COST, "--tokens-per-day", "1M", "--prices", "{p.yaml}", "--json"], BAD,
        files={"p.yaml": _p})
    add("buy-prices", f"source-{_name}", [*PBUY, "--json"], BAD, files={"p.yaml": _p})
add("cost", "two-macs-as-one", [*COST[:3], "--gpu", "m4-max-64gb", "--gpu", "m4-max-64gb", "--tokens-per-day", "1M"],
    BAD)
add("check", "two-sparks-as-one", ["check", "--model", M1, "--gpu", "dgx-spark", "--gpu", "dgx-spark"], BAD)
add("global", "hardware-db-empty", ["--hardware-db", "", "check", "--model", M1, "--gpu", "rtx-4090"], BAD)
add("global", "model-db-empty", ["--model-db", " ", "check", "--model", M1, "--gpu", "rtx-4090"], BAD)
add("synth", "name-past-the-limit", ["synth", "{x.txt}" + "b" * 300 + ".gguf", "--model", "gemma-3-270m"], BAD,
    files={"x.txt": "kept\n"})

# --- and by its follow-up (extra databases, strict numbers, hosts, -ot buffers, --html names) ---------------------
_HOSTS = {"broadcast": "255.255.255.255", "unspecified": "0.0.0.0", "unspecified-v6": "::", "multicast": "224.0.0.1",
          "short-form": "1.2.3", "integer": "167772162", "hex": "0x0a.0.0.2"}
for _name, _host in _HOSTS.items():
    add_cluster(f"host-{_name}", cluster(nodes=[HEAD, node("w", q(_host))]), BAD)
add("ot-check", "buffer-with-space", [*CHK, "-ot", "blk= CPU"], BAD)  # llama.cpp looks the name up exactly
add("report", "html-name-past-the-limit", ["report", "--gpu", "rtx-4090", "--model", M1, "--html",
                                           "{x.txt}" + "a" * 300 + ".html"], BAD, files={"x.txt": "kept\n"})
for _name, _usd in {"quoted": '"999"', "boolean": "true"}.items():  # a database value is never coerced
    add("buy-prices", f"usd-{_name}-strict", PBUY, BAD, files={"p.yaml": prices(entry(street=point(usd=_usd)))})
_GPU = next(g for f in sorted((Path(__file__).parent.parent / "hardware_db" / "gpus").glob("*.yaml"))
            for g in yaml.safe_load(f.read_text(encoding="utf-8"))["gpus"] if g["id"] == "rtx-4090")
for _key in ("newline-forge", "ansi", "bidi-rlo"):
    _evil = {**_GPU, "id": "evil-gpu", "name": HOSTILE_NAMES[_key][0], "aliases": [], "device_names": []}
    add("hardware-db", f"gpu-name-{_key}", ["--hardware-db", ".", "report", "--gpu", "evil-gpu", "--model", M1,
                                           "--html", "{o.html}"], BAD,
        files={"g.yaml": yaml.safe_dump({"gpus": [_evil]}), "o.html": "kept\n"})
_EVIL_PSU = {**_GPU, "id": "evil-gpu", "aliases": [], "device_names": [], "pcie_gen": True}
add("hardware-db", "gpu-pcie-gen-true", ["--hardware-db", ".", "check", "--gpu", "evil-gpu", "--model", M1], BAD,
    files={"g.yaml": yaml.safe_dump({"gpus": [_EVIL_PSU]})})
for _key, _fields in {"apple-cuda": {"vendor": "apple", "backend": "cuda"},
                      "nvidia-sycl": {"backend": "sycl"}}.items():  # a backend the vendor has not: refused at load
    add("hardware-db", f"gpu-backend-{_key}", ["--hardware-db", ".", "check", "--gpu", "evil-gpu", "--model", M1,
                                               "--engine", "vllm"], BAD,
        files={"g.yaml": yaml.safe_dump({"gpus": [{**_GPU, "id": "evil-gpu", "aliases": [], "device_names": [],
                                                   **_fields}]})})
_EVIL_CC = {**_GPU, "id": "evil-gpu", "aliases": [], "device_names": [], "compute_capability": "gfx1100"}
for _engine in ("vllm", "transformers"):  # the engines compare a CUDA GPU's capability as a number
    add("hardware-db", f"cuda-gpu-gfx-capability-{_engine}", ["--hardware-db", ".", "check", "--gpu", "evil-gpu",
                                                              "--model", M1, "--engine", _engine], BAD,
        files={"g.yaml": yaml.safe_dump({"gpus": [_EVIL_CC]})})

# --- and by the engines' corpus (vLLM, transformers, Ollama options; numbers; drafters; mixed machines) ------------
VLLM = ["check", "--model", "gemma-3-12b", "--gpu", "h100-sxm", "--engine", "vllm"]
add("engines", "kv-dtype-injection", [*VLLM, "--kv-cache-dtype", "fp8; touch x"], BAD)  # printed in the command
add("engines", "kv-dtype-bf16", [*VLLM, "--kv-cache-dtype", "bf16"], BAD)  # vLLM spells it bfloat16
add("engines", "kv-dtype-bfloat16", [*VLLM, "--kv-cache-dtype", "bfloat16"], OK, must=("--kv-cache-dtype bfloat16",))
add("engines", "batched-below-seqs", [*VLLM, "--max-num-batched-tokens", "4"], BAD)  # vLLM refuses to start
add("engines", "version-arabic-digits", [*VLLM, "--engine-version", "\u0660.\u0661\u0661.\u0660"], BAD)
for _opt, _value in {"--parallel": "\u0661\u0660", "--margin": "\uff11", "--batch": "5\u0661\u0662",
                     "--parallel-underscore": "1_0"}.items():
    add("numbers", f"{_opt[2:]}-not-ascii", [*CHK, _opt.split("-underscore")[0], _value], BAD)
add("numbers", "rate-arabic", ["serve-plan", "--model", M1, "--gpu", "rtx-4090", "--rate", "\u0661"], BAD)
for _value in ("nan", "-inf", "-1", "\u0661\u0660"):
    add("list", f"min-memory-{_value}", ["list", "gpus", "--min-memory", _value], BAD)
add("speculative", "draft-empty", ["check", "--model", "gemma-4-31B", "--gpu", "h100-sxm", "--draft", ""], BAD)
add("speculative", "draft-quant-only", ["check", "--model", "gemma-4-31B", "--gpu", "h100-sxm", "--draft", ":Q8_0"],
    BAD)
add("machines", "mac-and-a-card", ["check", "--model", M1, "--gpu", "rtx-4090", "--gpu", "m4-max-64gb"], BAD)
add("machines", "strix-halo-and-an-egpu", ["check", "--model", M1, "--gpu", "ryzen-ai-max-395-128gb", "--gpu",
                                           "rtx-3090"], OK)  # OCuLink / USB4 boxes run this

add("serve-plan", "ctx-zero-is-the-trained-context", [*SP, "--ctx", "0"], OK, must=("-c 32768",))  # not -c 256
add("serve-plan", "ollama-ctx-below-request", [*SP, "--engine", "ollama", "--ctx", "1"], BAD)  # Ollama truncates
add("serve-plan", "ollama-past-trained-context", [*SP, "--engine", "ollama", "--prompt-tokens", "200000"], BAD)

for _engine in ("vllm", "ollama"):  # a report asks --mtp as typed: each cell's model names its own drafter
    add("report", f"mtp-{_engine}", ["report", "--gpu", "h100-sxm", "--model", "gemma-4-31B", "--engine", _engine,
                                      "--mtp", "--json"], OK)

# llama.cpp's placement and kernel options under an engine that has none: refused, never dropped without a word
for _engine, _args in {"vllm": ["-ot", "blk=CPU"], "transformers": ["-ngl", "10"], "ollama": ["--swa-full"],
                       "vllm-ub": ["-ub", "256"], "vllm-ctv": ["--cache-type-v", "q8_0"]}.items():
    add("engines", f"llamacpp-option-{_engine}", [*VLLM[:5], "--engine", _engine.split("-")[0], *_args], BAD)
add("engines", "ollama-flash-attn", [*VLLM[:5], "--engine", "ollama", "-fa", "on"], OK)  # Ollama's own setting

add("serve-plan", "vllm-pp-on-one-machine", [*SP, "--engine", "vllm", "--pipeline-parallel-size", "2"], BAD)

# a pre-quantized format with no checkpoint to load: the command served bf16 while the estimate counted 4-bit weights
for _engine, _quant in (("vllm", "nvfp4"), ("vllm", "awq-int4"), ("transformers", "gptq-int4")):
    add("engines", f"no-checkpoint-{_engine}-{_quant}", ["check", "--model", "gemma-2-2b", "--gpu", "rtx-4090",
                                                         "--engine", _engine, "--quant", _quant], BAD)
add("engines", "checkpoint-known", [*VLLM[:5], "--engine", "vllm", "--quant", "awq-int4"], OK,
    must=("vllm serve gaunernst/gemma-3-12b-it-qat-autoawq",))
# vLLM's wheels since 0.31 carry kernels from compute capability 7.5 (T4) on: no V100, no Pascal
for _gpu in ("v100-pcie-32gb", "p40"):
    add("engines", f"vllm-on-{_gpu}", ["check", "--model", M1, "--gpu", _gpu, "--engine", "vllm"], BAD)
add("engines", "vllm-0.20-on-v100", ["check", "--model", M1, "--gpu", "v100-pcie-32gb", "--engine", "vllm",
                                     "--engine-version", "0.20.0"], OK)
add("engines", "transformers-fp8-on-ampere", ["check", "--model", M1, "--gpu", "a100-80gb-sxm", "--engine",
                                              "transformers", "--quant", "fp8"], BAD)  # FineGrainedFP8 needs 8.9
add("engines", "transformers-fp8-on-hopper", ["check", "--model", M1, "--gpu", "h100-sxm", "--engine", "transformers",
                                              "--quant", "fp8"], OK)
# drafting options where no cell would use them, and a drafter no model takes: said, not dropped or blamed on speed
add("report", "mtp-transformers", ["report", "--gpu", "h100-sxm", "--model", "gemma-4-31B", "--engine",
                                   "transformers", "--mtp"], BAD)
add("report", "draft-model-vllm", ["report", "--gpu", "h100-sxm", "--model", "gemma-4-31B", "--engine", "vllm",
                                   "--draft", "gemma-4-E2B"], BAD)
add("recommend", "ollama-draft-model", ["recommend", "--gpu", "rtx-4090", "--engine", "ollama", "--draft",
                                        "gemma-4-E2B", "--acceptance", "0.6"], BAD)  # Ollama drafts with MTP only
add("recommend", "mtp-ollama-line-drafts", ["recommend", "--gpu", "rtx-4090", "--mtp", "--top", "1"], OK,
    must=("DRAFT ./mtp-gemma-4",))  # the Ollama alternative runs the drafter the speed counts
for _value in ("nan", "1.5", "-1"):  # report under vLLM took them into every cell's speed (nan: an internal error)
    add("report", f"vllm-mtp-acceptance-{_value}", ["report", "--gpu", "rtx-4090", "--model", "gemma-4-E2B", "--engine",
                                                    "vllm", "--mtp", "--acceptance", _value, "--json"], BAD)
add("report", "vllm-mtp-draft-max-0", ["report", "--gpu", "rtx-4090", "--model", "gemma-4-31B", "--engine", "vllm",
                                       "--mtp", "--draft-max", "0", "--json"], BAD)
add("engines", "transformers-max-new-tokens-0", [*VLLM[:5], "--engine", "transformers", "--max-new-tokens", "0"],
    BAD)  # generate() refuses it
add("recommend", "draft-for-no-model", ["recommend", "--gpu", "rtx-4090", "--draft", "gemma-4-31B"], BAD)
add("engines", "transformers-ctx-below-a-request", [*VLLM[:5], "--engine", "transformers", "--ctx", "100"], BAD)

# --- known failures: cause -> (diagnosis, case ids); none today (docs/hostile.md lists the 16 fixed) ----------------
# A fix turns its cases into XPASS, which strict xfail reports as a failure: remove the cause's entry with the fix.
CAUSES: dict[str, tuple[str, list[str]]] = {}
XFAIL: dict[str, str] = {case_id: f"{cause}: {text}" for cause, (text, ids) in CAUSES.items() for case_id in ids}

_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), sorted({i for i in _ids if _ids.count(i) > 1})
assert not set(XFAIL) - set(_ids), sorted(set(XFAIL) - set(_ids))
CASES = [Case(**{**c.__dict__, "xfail": c.xfail or XFAIL.get(c.id)}) for c in CASES]


# --- the runner ------------------------------------------------------------------------------------------------------
# Each case is its own process with the real entry point, its own stdin/stdout/stderr and exit status. Starting
# Python and importing the program costs ten times what most cases take, so by default a small fork server (one per
# worker thread) imports gemma_fit once and forks a child per case; the child sets its resource limits, points
# fds 0/1/2 at /dev/null and two files, runs `gemma_fit.cli.entry:main` with the case's argv and exits with its
# status. GEMMA_FIT_HOSTILE_SPAWN=1 runs every case as a fresh `python -c` instead (slower, same verdicts).

LIMITS = "import resource as r; r.setrlimit(r.RLIMIT_AS, (3 << 30, 3 << 30)); r.setrlimit(r.RLIMIT_CPU, (90, 90))"
SPAWN = [sys.executable, "-c", f"{LIMITS}; from gemma_fit.cli.entry import main; main()"]
# Run once in the fork server before it serves, output thrown away, so that each child starts with the modules and
# schemas a case needs already loaded (what a cold process pays is the same for every case, and no case's verdict).
WARM = """
import contextlib, io, shutil, tempfile
from pathlib import Path
folder = Path(tempfile.mkdtemp())
(folder / "c.yaml").write_text("network: {bandwidth_gbit: 10, latency_us: 5}\\nnodes: [{name: a, host: h1, gpus: [t4]},"
                               " {name: b, host: h2, gpus: [t4]}]\\n")
(folder / "m.yaml").write_text("name: x\\ngpus: [t4]\\nram_gb: 8\\n")
(folder / "p.yaml").write_text("prices:\\n  - {id: t4, segment: datacenter, note: none}\\n")
for argv in (["check", "--gpu", "t4", "--model", "gemma-3-270m", "-ot", "blk=CPU", "--json"],
             ["serve-plan", "--hardware", str(folder / "c.yaml"), "--model", "gemma-3-270m"],
             ["serve-plan", "--hardware", str(folder / "c.yaml"), "--model", "gemma-3-270m", "--engine", "vllm"],
             ["serve-plan", "--gpu", "t4", "--model", "gemma-3-270m", "--rate", "1"],
             ["check", "--hardware", str(folder / "m.yaml"), "--model", "gemma-3-270m"],
             ["report", "--hardware", str(folder / "m.yaml"), "--model", "gemma-3-270m"],
             ["recommend", "--gpu", "t4", "--ctx", "-1"],
             ["buy", "--model", "gemma-3-270m", "--prices", str(folder / "p.yaml"), "--ctx", "-1"],
             ["buy", "--model", "gemma-3-270m", "--prices", str(folder / "p.yaml"), "--segment", "datacenter"]):
    sys.argv = ["gemma-fit", *argv]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main()
        except SystemExit:
            pass
shutil.rmtree(folder)
"""
FORK_SERVER = f"""
import json, os, sys, traceback
reply_fd = int(sys.argv[1])
from gemma_fit.cli.entry import main
import gemma_fit.api, gemma_fit.cli.app
from gemma_fit.cli import state
state.catalog()
{WARM}
requests, replies = sys.stdin.buffer, os.fdopen(reply_fd, "w")
for line in requests:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            {LIMITS}
            os.chdir(req["cwd"])
            os.environ["COLUMNS"] = str(req["columns"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            os.dup2(os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            sys.argv = ["gemma-fit", *req["args"]]
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os._exit(code)
    replies.write(json.dumps({{"pid": pid}}) + "\\n"); replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({{"status": os.waitstatus_to_exitcode(status)}}) + "\\n"); replies.flush()
"""


@dataclass
class Outcome:
    rc: int | None  # None: killed by the hang guard
    stdout: str
    stderr: str
    changed: list[str]  # files of the user's that the command modified
    seconds: float = 0.0  # for the record (GEMMA_FIT_HOSTILE_RECORD), never judged


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env.update(COLUMNS="2000", LINES="50", PYTHONIOENCODING="utf-8")
    return env


class ForkServer:
    """One warm gemma-fit process that forks a child per case (used by one thread at a time)."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER, str(write_fd)], stdin=subprocess.PIPE,
                                     env=_env(), pass_fds=(write_fd,), stdout=subprocess.DEVNULL)
        os.close(write_fd)
        # read unbuffered, a byte at a time (two short lines per case): a buffered reader could hold the status line
        # already, and select() on the pipe would then wait out the hang guard for a case that had ended
        self.replies = read_fd

    def _line(self, timeout: float | None = None) -> str | None:
        """The fork server's next reply line; None when nothing came within `timeout` seconds."""
        import select

        buf = bytearray()
        while not buf.endswith(b"\n"):
            if timeout is not None and not select.select([self.replies], [], [], timeout)[0]:
                return None
            chunk = os.read(self.replies, 1)
            if not chunk:
                break
            buf += chunk
        return buf.decode()

    def run(self, args: list[str], cwd: Path, columns: int) -> tuple[int | None, bytes, bytes]:
        import contextlib
        import signal

        out, err = cwd / ".stdout", cwd / ".stderr"
        assert self.proc.stdin is not None
        request = {"args": args, "cwd": str(cwd), "out": str(out), "err": str(err), "columns": columns}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        line = self._line()
        if not line:
            raise RuntimeError("the fork server died (its stderr is above)")
        pid = json.loads(line)["pid"]
        reply = self._line(HANG_GUARD_S)
        hung = reply is None
        if hung:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.kill(pid, signal.SIGKILL)
            reply = self._line()
        status = json.loads(reply or "{}").get("status")
        if not hung and status is None:
            raise RuntimeError("the fork server died (its stderr is above)")
        return (None if hung else status), out.read_bytes(), err.read_bytes()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        os.close(self.replies)


def _write(folder: Path, files: dict[str, Any]) -> dict[str, Path]:
    paths = {}
    for name, content in files.items():
        path = folder / name
        if content is FIFO:
            os.mkfifo(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths[name] = path
    return paths


def _changed(paths: dict[str, Path], files: dict[str, Any]) -> list[str]:
    out = []
    for name, path in paths.items():
        content = files[name]
        if content is FIFO:
            if not stat.S_ISFIFO(path.lstat().st_mode):
                out.append(f"{name}: no longer a FIFO")
            continue
        want = content if isinstance(content, bytes) else content.encode("utf-8")
        if not path.is_file() or path.read_bytes() != want:
            out.append(f"{name}: contents changed")
    return out


def run_case(case: Case, folder: Path, server: ForkServer | None) -> Outcome:
    folder.mkdir(parents=True)
    paths = _write(folder, case.files)
    args = []
    for arg in case.args:
        for name, path in paths.items():
            arg = arg.replace("{" + name + "}", str(path))
        args.append(arg)
    start = time.monotonic()
    if server is not None:
        rc, stdout, stderr = server.run(args, folder, case.columns)
    else:
        try:
            proc = subprocess.run([*SPAWN, *args], capture_output=True, timeout=HANG_GUARD_S, cwd=folder,
                                  env={**_env(), "COLUMNS": str(case.columns)}, stdin=subprocess.DEVNULL, check=False)
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = None, exc.stdout or b"", exc.stderr or b""
    return Outcome(rc, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"),
                   _changed(paths, case.files), time.monotonic() - start)


def problems(case: Case, out: Outcome) -> list[str]:
    """Everything wrong with one outcome, against the case's expectation; empty when it passes."""
    found: list[str] = []
    if out.rc is None:
        return [f"no answer within {HANG_GUARD_S} s (killed as a hang)"]
    if out.rc < 0:
        found.append(f"killed by signal {-out.rc} (a resource limit: memory or CPU seconds)")
    for stream, text in (("stdout", out.stdout), ("stderr", out.stderr)):
        if "Traceback" in text:
            found.append(f"a traceback on {stream}")
        if "internal error" in text:
            found.append(f"'internal error' on {stream}")
        bad = sorted({m.group() for m in UNSAFE.finditer(text)})
        if bad:
            found.append(f"raw control/bidi characters on {stream}: {[hex(ord(c)) for c in bad]}")
    refused = out.rc == 2
    answered = out.rc in ANSWER_CODES
    if refused:
        lines = out.stderr.split("\n")
        if len(lines) != 2 or lines[1] != "" or not lines[0].startswith("gemma-fit: error: "):
            found.append(f"exit 2 but not exactly one 'gemma-fit: error:' line on stderr ({len(lines) - 1} lines)")
        if out.stdout:
            found.append("exit 2 with output on stdout")
    if case.expect == BAD and not refused:
        found.append(f"expected bad input (exit 2), got exit {out.rc}")
    elif case.expect == OK and not answered:
        found.append(f"expected an answer (exit 0/3/4), got exit {out.rc}")
    elif case.expect == ANY and not (refused or answered):
        found.append(f"expected bad input (exit 2) or an answer (0/3/4), got exit {out.rc}")
    if answered:
        if "--json" in case.args:
            try:
                json.loads(out.stdout, parse_constant=_no_constant)
            except ValueError as exc:
                found.append(f"--json is not strict JSON: {exc}")
        found += [f"stdout lacks {m!r}" for m in case.must if m not in out.stdout]
    found += [f"stdout holds {m!r}" for m in case.must_not if m in out.stdout]
    found += [f"a file of the user's was modified: {c}" for c in out.changed]
    return found


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def describe(case: Case, out: Outcome) -> str:
    return (f"{case.id}: exit {out.rc}\n  args: {list(case.args)!r}\n  stderr: {out.stderr[-600:]!r}\n"
            f"  stdout: {out.stdout[:300]!r}")


# vLLM across nodes is not llama.cpp in one process: 4 x 8 GPUs is a cluster vLLM plans (TP across nodes), not "more
# than 16 devices"; 32 x 16 GPUs is planned in bounded time.
add("cluster-vllm", "h100-4x8", ["serve-plan", "--hardware", "{c.yaml}", "--model", "gemma-3-27b", "--engine", "vllm",
                                 "--quant", "bf16", "--json"], OK,
    files={"c.yaml": many_nodes(4, "[" + ",".join(["h100-sxm"] * 8) + "]")})
add("cluster-vllm", "rtx-32x16", ["serve-plan", "--hardware", "{c.yaml}", "--model", "gemma-3-27b", "--engine", "vllm",
                                  "--quant", "bf16", "--json"], ANY,
    files={"c.yaml": many_nodes(32, "[" + ",".join(["rtx-3090"] * 16) + "]")})

add("numbers", "gpu-zero-width", ["check", "--gpu", "rtx\u200b-4090", "--model", "9b"], BAD)
add("numbers", "cpu-zero-width", ["check", "--gpu", "rtx-4090", "--model", "9b", "--cpu", "Ryzen\u200b 9 7950X"], BAD)
add("ot-check", "literal-1000", ["check", "--gpu", "rtx-4090", "--model", "gemma-3-27b", "--json", "-ot",
                                 ",".join(f"zz{i}=CPU" for i in range(1000))], OK)
add("cluster-vllm", "v6-zone-shell", ["serve-plan", "--hardware", "{c.yaml}", "--model", "gemma-3-27b", "--engine",
                                      "vllm", "--quant", "bf16"], BAD,
    files={"c.yaml": cluster(nodes=[node("head", q("fe80::1% ; rm -rf ~"), "[rtx-3090]"),
                                    node("w", "192.168.1.11", "[rtx-3090]")])})

# Numbers past any float and ids past Python's 4,300-digit int parse: one line, never an internal error.
_HUGE = "9" * 400
for _opt in ("--prompt-tokens", "--output-tokens", "--images", "--cores", "--threads", "--sockets", "--ram-channels"):
    add("numbers", f"huge{_opt}", ["check", "--gpu", "rtx-4090", "--model", "9b", _opt, _HUGE], BAD)
add("ot-check", "buffer-5000-digits", ["check", "--gpu", "rtx-4090", "--model", "gemma-3-27b", "-ot",
                                       "blk=CUDA" + "9" * 5000], BAD)
add("numbers", "db-folder-proc", ["--hardware-db", "/proc", "check", "--gpu", "rtx-4090", "--model", "9b"], ANY)


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every selected case, run once, in parallel: a thread per worker, each with its own fork server."""
    import queue
    import threading

    wanted = {item.callspec.params["case"].id for item in request.session.items
              if getattr(item, "originalname", None) == "test_hostile_input" and hasattr(item, "callspec")}
    # the slow ones first, so that they do not end the run alone
    selected = sorted((c for c in CASES if c.id in wanted), key=lambda c: c.expect == BAD)
    base = tmp_path_factory.mktemp("hostile")
    todo: queue.Queue[tuple[int, Case]] = queue.Queue()
    for i, c in enumerate(selected):
        todo.put((i, c))
    results: dict[str, Outcome] = {}
    spawn = os.environ.get("GEMMA_FIT_HOSTILE_SPAWN") == "1"

    def worker() -> None:
        server = None if spawn else ForkServer()
        try:
            while True:
                try:
                    i, c = todo.get_nowait()
                except queue.Empty:
                    return
                results[c.id] = run_case(c, base / f"case{i}", server)
        finally:
            if server is not None:
                server.close()

    threads = [threading.Thread(target=worker) for _ in range(max(2, (os.cpu_count() or 2) + 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = os.environ.get("GEMMA_FIT_HOSTILE_RECORD")
    if record:  # every outcome, for a failure report (docs/hostile.md)
        by_id = {c.id: c for c in selected}
        Path(record).write_text(json.dumps({k: {"args": list(by_id[k].args), "files": {
            n: (v if isinstance(v, str) and len(v) < 4000 else repr(v)[:300]) for n, v in by_id[k].files.items()},
            "expect": by_id[k].expect, "rc": o.rc, "stdout": o.stdout[:3000], "stderr": o.stderr[-3000:],
            "seconds": round(o.seconds, 2), "problems": problems(by_id[k], o)} for k, o in results.items()}, indent=1))
    return results


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.xfail(strict=True, reason=c.xfail))
                                  if c.xfail else pytest.param(c, id=c.id) for c in CASES])
def test_hostile_input(case: Case, outcomes: dict[str, Outcome]) -> None:
    out = outcomes[case.id]
    found = problems(case, out)
    assert not found, describe(case, out) + "\n  problems: " + "; ".join(found)


def test_corpus_size() -> None:
    """The corpus covers every surface the audit aimed at, with enough cases each."""
    surfaces: dict[str, int] = {}
    for c in CASES:
        surfaces[c.surface] = surfaces.get(c.surface, 0) + 1
    assert len(CASES) >= 250
    for surface in ("recommend", "buy", "buy-prices", "serve-plan", "cluster-rpc", "cluster-vllm", "machine-check",
                    "machine-report", "machine-recommend", "ot-check", "ot-report"):
        assert surfaces.get(surface, 0) >= 10, (surface, surfaces.get(surface))
