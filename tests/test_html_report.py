"""Reports people share: `report` and the HTML of `check --html` / `report --html`.

Rendered in real headless Chromium (skipped only when /usr/bin/chromium is absent): the page draws,
its verdict is in the DOM, and it asks for nothing from the network. Names from databases and the
command line render as text. The terminal table honours NO_COLOR, pipes and --quiet.
"""

from __future__ import annotations

import json
import os
import pty
import re
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gemma_fit.base.errors import BadInput
from gemma_fit.cli.report import report_command
from gemma_fit.db.catalog import Catalog
from gemma_fit.engines.llamacpp import run_check
from gemma_fit.hardware.select import select_hardware
from gemma_fit.jobs.report import SCHEMA, check_sources, gpu_ranking, run_report
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model
from gemma_fit.model.spec import ModelSpec
from gemma_fit.present.documents import check_json
from gemma_fit.present.html import render_check_html, render_report_html, write_html

CHROMIUM = Path("/usr/bin/chromium")
EVIL = "Evil \"quoted\" 'GPU' <script>alert(1)</script>"
# `report` registered on the real app, as cli.py does once it is wired; main() gives the contract's exit statuses
CLI = [sys.executable, "-m", "gemma_fit"]
ANSI = re.compile(r"\x1b\[")
COLOR_SGR = re.compile(r"\x1b\[[0-9;]*?(?:3[0-9]|9[0-7]|38;)[0-9;]*m")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env.update(extra)
    return env


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=_env(**env), check=False)


@pytest.fixture(scope="module")
def check_doc() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    resolved = resolve_model("9b")
    settings = RunSettings(n_ctx=4096)
    doc = check_json(run_check(resolved, "Q5_K_M", settings, select_hardware(["a4000"], None, ())))
    return doc, gpu_ranking(resolved, "Q5_K_M", settings)


@pytest.fixture(scope="module")
def evil_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hardware database with one GPU whose name and source try to break out of the HTML."""
    folder = tmp_path_factory.mktemp("evil-db")
    (folder / "evil.yaml").write_text(textwrap.dedent(f"""\
        gpus:
          - id: "evil-gpu"
            name: {json.dumps(EVIL)}
            vendor: "nvidia"
            arch: "ampere"
            backend: "cuda"
            memory_bytes: 17179869184
            usable_memory_bytes: 17171480576
            usable_note: "test entry"
            unified_memory: false
            memory_type: "GDDR6"
            memory_bandwidth_gbps: 448
            fp16_tensor_tflops: 76.7
            bf16_supported: true
            ecc: true
            form_factor: "test"
            source: "https://example.invalid/\\"><script>alert(2)</script>"
        """), encoding="utf-8")
    return folder


# --- the HTML in a real browser -----------------------------------------------------------------------


def png_has_content(path: Path) -> tuple[int, int, float]:
    """Width, height and the fraction of rows that a one-colour image could not have.

    Decodes the PNG's chunks and inflates its IDAT stream. In an image of one colour, every scanline after
    the first is, after its filter byte, either that colour repeated (filter 0) or the first pixel followed
    by zeros (filters 1-4); a row that is neither proves the image is not blank.
    """
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0, header
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw = zlib.decompress(bytes(idat))
    stride = 1 + width * bpp
    assert len(raw) == stride * height
    busy = 0
    for r in range(1, height):
        row = raw[r * stride:(r + 1) * stride]
        flt, first, rest = row[0], row[1:1 + bpp], row[1 + bpp:]
        uniform = rest == first * (width - 1) if flt == 0 else rest.count(0) == len(rest)
        busy += not uniform
    return width, height, busy / height


def chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(HOME=str(tmp)), check=False)


def assert_self_contained(html: str) -> None:
    low = html.lower()
    for bad in ("<script", "<link", "@import", "url(", "<iframe", "<img", "<object", "<embed", "srcset"):
        assert bad not in low, f"{bad} in the HTML"
    assert not re.search(r"\ssrc\s*=", low), "a src= attribute"
    for m in re.finditer(r"<(\w+)[^>]*\shref\s*=\s*[\"']?([^\"'\s>]*)", low):
        tag, url = m.group(1), m.group(2)
        assert tag == "a", f"<{tag} href=...> loads a resource"
        assert url.startswith(("https://", "http://", "#")), url
    assert "content-security-policy" in low and "default-src 'none'" in low


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize("kind", ["check", "report"])
def test_renders_in_headless_chromium(kind: str, tmp_path: Path, check_doc: tuple[dict[str, Any], list]) -> None:
    if kind == "check":
        doc, ranking = check_doc
        html = render_check_html(doc, ranking, check_sources(doc))
        verdict_text = f"{doc['model']['id']} {doc['model']['quant']}"
        verdict = doc["verdict"]
    else:
        report = run_report(["2b", "9b"], ["Q4_K_M", "Q8_0"], [["a4000"], ["rtx-3060-12gb"], ["rtx-4090"]],
                            [8192], RunSettings(), what_to_buy=True)
        html, verdict_text, verdict = render_report_html(report), "combinations", "go"
    assert_self_contained(html)
    page = tmp_path / f"{kind}.html"
    write_html(page, html)
    png = tmp_path / f"{kind}.png"
    proc = chromium([f"--screenshot={png}", "--window-size=1200,1600", page.as_uri()], tmp_path)
    assert png.is_file(), proc.stderr[-2000:]
    width, height, busy = png_has_content(png)
    assert (width, height) == (1200, 1600)
    assert busy > 0.2, f"the screenshot is (nearly) blank: {busy:.0%} of rows have content"
    dom = chromium(["--dump-dom", page.as_uri()], tmp_path / "dom").stdout
    assert 'id="verdict"' in dom and f'class="badge {verdict}"' in dom
    assert verdict_text in dom
    assert "<svg" in dom


def test_check_html_sections(check_doc: tuple[dict[str, Any], list]) -> None:
    doc, ranking = check_doc
    html = render_check_html(doc, ranking, check_sources(doc))
    assert_self_contained(html)
    assert f'<span class="badge {doc["verdict"]}">{doc["verdict"]}</span>' in html
    for section in ("memory", "context", "speed", "run", "buy", "assumptions"):
        assert f'<section id="{section}">' in html
    assert doc["llama_server_command"] in html
    assert "0c1e570 (Oct 2026)" in html
    assert "https://www.techpowerup.com/gpu-specs/rtx-a4000.c3756" in html  # the GPU entry's sources
    assert "https://huggingface.co/google/gemma-2-9b/blob/main/config.json" in html  # the model entry's
    assert "Sorted by verdict" in html and len(ranking) >= 70
    order = {"go": 0, "tight": 1, "offload": 2, "no-go": 3}
    assert [order[r["verdict"]] for r in ranking] == sorted(order[r["verdict"]] for r in ranking)
    assert "GiB" in html and "<svg role=\"img\"" in html


def test_absent_performance_renders(check_doc: tuple[dict[str, Any], list]) -> None:
    doc, ranking = check_doc
    doc = {k: v for k, v in doc.items() if k != "performance"}
    ranking = [{**r, "decode_tokens_per_s": None} for r in ranking]
    html = render_check_html(doc, ranking, check_sources(doc))
    assert "No speed estimate" in html and "Speed per GPU" not in html


# --- names render as text ---------------------------------------------------------------------------------


def test_names_are_escaped(evil_db: Path, tmp_path: Path) -> None:
    resolved = resolve_model("2b")
    settings = RunSettings()
    hw = select_hardware(["evil-gpu"], None, (evil_db,))
    doc = check_json(run_check(resolved, "Q4_K_M", settings, hw))
    doc["model"]["id"] = "gemma-<script>alert(3)</script>"
    evil = Catalog(hardware_dirs=(evil_db,))
    html = render_check_html(doc, gpu_ranking(resolved, "Q4_K_M", settings, evil), check_sources(doc))
    report = run_report(["2b"], ["Q4_K_M"], [["evil-gpu"]], [4096], RunSettings(), catalog=evil, what_to_buy=True)
    for page in (html, render_report_html(report)):
        assert "<script" not in page.lower()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "Evil &#34;quoted&#34; &#39;GPU&#39;" in page
        assert "alert(2)</script>" not in page and "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in page
        assert_self_contained(page)
    assert "alert(3)" in html and "&lt;script&gt;alert(3)" in html


def test_cli_html_with_evil_database(evil_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "evil.html"
    proc = run_cli("--hardware-db", str(evil_db), "report", "--model", "2b", "--gpu", "evil-gpu", "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert_self_contained(page)


# --- the report ---------------------------------------------------------------------------------------------

GPUS10 = ["a4000", "rtx-3060-12gb", "rtx-4090", "rtx-3090", "l40s", "a100-80gb-sxm", "h100-sxm", "t4", "l4",
          "h200-sxm"]


def test_full_matrix_completes() -> None:
    report = run_report(["all"], ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"], [[g] for g in GPUS10],
                        [4096, 8192, 32768, 131072], RunSettings())  # its time: benchmarks/bench_report.py
    assert report["schema"] == SCHEMA and len(report["cells"]) == 17 * 5 * 10 * 4
    assert sum(report["summary"].values()) == 3400 and report["summary"]["error"] == 0
    cell = report["cells"][0]
    assert {"hardware", "model", "quant", "ctx", "verdict", "min_headroom_bytes", "max_ctx_fit", "n_gpu_layers",
            "decode_tokens_per_s", "check"} <= set(cell)
    assert cell["check"]["schema"] == "gemma-fit.check/1"
    html = render_report_html(report)
    assert_self_contained(html)
    assert "memory bars are left out" in html


def test_report_cells_match_check() -> None:
    report = run_report(["9b"], ["q5_k_m"], [["a4000"], ["rtx-4090+rtx-4090"]], [4096, 0], RunSettings())
    assert report["quants"] == ["Q5_K_M"] and [h["key"] for h in report["hardware"]] == ["a4000", "rtx-4090+rtx-4090"]
    single = report["cells"][0]
    doc = check_json(run_check(resolve_model("9b"), "Q5_K_M", RunSettings(n_ctx=4096),
                               select_hardware(["a4000"], None, ())))
    assert single["check"] == doc and single["verdict"] == doc["verdict"]
    assert single["min_headroom_bytes"] == doc["memory"]["devices"][0]["headroom_bytes"]
    assert report["cells"][1]["n_ctx"] == 8192  # --ctx 0: the trained context
    two = report["cells"][2]
    assert len(two["check"]["memory"]["devices"]) == 2
    assert two["min_headroom_bytes"] == min(d["headroom_bytes"] for d in two["check"]["memory"]["devices"])


def test_a_bad_cell_is_a_cell_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    import gemma_fit.engines.llamacpp as check_module

    real = check_module.validate

    def refuse_2b(s: RunSettings, model: ModelSpec) -> RunSettings:
        if model.id == "gemma-2-2b":
            raise BadInput("refused for this model")
        return real(s, model)

    monkeypatch.setattr(check_module, "validate", refuse_2b)
    report = run_report(["2b", "9b"], [], [["a4000"]], [], RunSettings(n_gpu_layers=99))
    assert [c["verdict"] for c in report["cells"]][0] == "error"
    assert report["cells"][0]["error"] == "refused for this model"
    assert report["cells"][1]["verdict"] in ("go", "tight", "offload")
    assert report["cells"][1]["check"]["settings"]["n_gpu_layers"] == 43  # -ngl 99 clamps to all layers


def test_write_html_is_atomic_and_reports_failures(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    write_html(target, "<p>one</p>")
    write_html(target, "<p>two</p>")
    assert target.read_text() == "<p>two</p>" and [p.name for p in tmp_path.iterdir()] == ["r.html"]
    with pytest.raises(BadInput, match="cannot write"):
        write_html(tmp_path / "missing" / "r.html", "x")
    with pytest.raises(BadInput, match="is a directory"):
        write_html(tmp_path, "x")


def test_check_page(tmp_path: Path) -> None:
    from gemma_fit import api

    page = api.check_page(api.check("9b", "a4000", quant="Q5_K_M", settings=RunSettings(n_ctx=4096)))
    assert '<span class="badge go">go</span>' in page and "What to buy" in page


# --- the command line -----------------------------------------------------------------------------------------

ARGS = ("report", "--model", "2b", "--model", "9b", "--gpu", "a4000,rtx-3060-12gb", "--gpu", "rtx-4090+rtx-4090",
        "--quant", "Q4_K_M", "--quant", "q8_0", "--ctx", "4096", "--ctx", "8192")


def test_typer_function_registers_on_any_app(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("report")(report_command)

    @app.callback()
    def _root() -> None:
        pass

    result = CliRunner().invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["cells"]) == 3 * 2 * 2 * 2 and report["hardware"][2]["gpus"] == ["rtx-4090", "rtx-4090"]


def test_pipe_has_no_ansi_and_table_is_there() -> None:
    proc = run_cli(*ARGS)
    assert proc.returncode == 0, proc.stderr
    assert not ANSI.search(proc.stdout) and not ANSI.search(proc.stderr)
    assert "rtx-4090+rtx-4090" in proc.stdout and "gemma-2-9b" in proc.stdout and "tight" in proc.stdout


def _run_in_pty(*args: str, **env: str) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL,
                            env=_env(COLUMNS="120", TERM="xterm-256color", **env))
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_no_color_on_a_terminal() -> None:
    coloured = _run_in_pty(*ARGS)
    assert COLOR_SGR.search(coloured), "a terminal should get colours (else this test proves nothing)"
    plain = _run_in_pty(*ARGS, NO_COLOR="1")
    assert "gemma-2-9b" in plain and not COLOR_SGR.search(plain)


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    out = tmp_path / "q.html"
    proc = run_cli(*ARGS, "--quiet", "--html", str(out))
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert out.is_file() and "What to buy" in out.read_text(encoding="utf-8")


def test_json_and_exit_statuses(tmp_path: Path) -> None:
    proc = run_cli(*ARGS, "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["schema"] == SCHEMA
    for args, message in ((["report", "--model", "9b", "--gpu", "nosuch"], "unknown GPU"),
                          (["report", "--gpu", "a4000"], "--model is required"),
                          (["report", "--model", "9b"], "--gpu or --hardware is required"),
                          (["report", "--model", "9b", "--gpu", "a4000", "--quant", "Q9"], "unknown quant"),
                          (["report", "--model", "9b", "--gpu", "a4000", "--ctx", "-5"], "--ctx -5 is impossible"),
                          (["report", "--model", "9b", "--gpu", "a4000", "--html", str(tmp_path / "no" / "x.html")],
                           "cannot write")):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_compact_cell_has_the_full_cells_figures() -> None:
    """A compact cell (a large report) skips the serving answer and the suggestion of what would fit instead, which
    it never shows; its figures, verdict and command are the full cell's, for a go and a no-go alike."""
    from gemma_fit.engines.registry import engine_named
    from gemma_fit.hardware.flags import MachineFlags
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.jobs.report_cells import HardwareConfig, cell

    cfg = HardwareConfig("rtx-3060-12gb", hardware_of(["rtx-3060-12gb"], None, (), MachineFlags(ram_gb=16)))
    for model, quant in (("9b", "Q4_K_M"), ("gemma-3-27b", "Q4_K_M"), ("gemma-3-27b", "BF16")):
        resolved = resolve_model(model)
        full = cell(cfg, resolved, quant, 8192, RunSettings(), engine_named("llama.cpp"), full=True)
        compact = cell(cfg, resolved, quant, 8192, RunSettings(), engine_named("llama.cpp"), full=False)
        assert {k: v for k, v in full.items() if k != "check"} == {k: v for k, v in compact.items() if k != "check"}
        assert compact["check"]["llama_server_command"] == full["check"]["llama_server_command"]
    assert full["verdict"] == "no-go" and "Q2_K" in full["check"]["suggestion"]  # the full cell says what would fit
