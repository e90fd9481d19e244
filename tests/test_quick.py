"""The quick path of `gemma-fit check` (gemma_fit.cli.quick): it reads a plain check line as typer does, or leaves it
to typer. Its table of options is the typer command's (written by scripts/write_check_words.py), and for any line
it reads, the parameters equal those typer passes to the command's body."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from write_check_words import render, table, typer_params  # scripts/ is on sys.path (conftest.py)

from gemma_fit.cli import check_words
from gemma_fit.cli.quick import check_params

REPO = Path(__file__).resolve().parent.parent


def test_table_is_the_typer_commands() -> None:
    words, defaults = table()
    assert (words, defaults) == (check_words.WORDS, check_words.DEFAULTS), \
        "check's options changed: run python scripts/write_check_words.py"
    written = (REPO / "gemma_fit" / "cli" / "check_words.py").read_text(encoding="utf-8")
    assert written == render(words, defaults)


README_LINES = [
    ["--gpu", "a4000", "--model", "9b", "--quant", "q5_k_m"],
    ["--gpu", "rtx-4090", "-m", "gemma-3-27b", "-q", "Q4_K_M", "--ctx", "32k", "--json"],
    ["-g", "rtx-3090", "-g", "rtx-3090", "-m", "27b", "-ngl", "auto", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
    ["--model", "e4b", "--gpu", "cpu", "--ram", "16", "--threads", "8", "--prompt-tokens", "2k", "--rate", "0.5"],
    ["--model", "26b-a4b", "--gpu", "rtx-4070", "-ot", "exps=CPU", "--n-cpu-moe", "4", "--mtp"],
]


@pytest.mark.parametrize("args", README_LINES, ids=lambda a: " ".join(a)[:40])
def test_plain_lines_are_read_as_typer_reads_them(args: list[str]) -> None:
    quick = check_params(args)
    assert quick is not None, "a plain check line must not need typer"
    assert quick == typer_params(args)


@pytest.mark.parametrize("args", [
    ["--help"], ["--model"], ["--ctx=8k", "--model", "9b"], ["--model", "-x"], ["--ctx", "-5"], ["-m9b"],
    ["--ctx", "eight"], ["--parallel", "2.5"], ["9b"], ["--", "--model", "9b"], ["--model-db", "x"],
    ["--margin", ""], ["--gpu", "a4000", "--json", "extra"],
])
def test_anything_in_doubt_goes_to_typer(args: list[str]) -> None:
    assert check_params(args) is None


_SAMPLES = {
    "str": st.sampled_from(["9b", "gemma-3-12b", "Q4_K_M", "a4000", "auto", "on", "q8_0", "", " x ", "é", "[/]",
                            "a=b", "blk\\.0=CPU", "-", "--json", "-1"]),
    "int": st.sampled_from(["0", "4", " 12 ", "1_000", "+3", "-2", "2.5", "x", "", "0x10", "٣"]),
    "float": st.sampled_from(["0.5", "1", "1e3", "nan", "inf", "-1", "x", "", " 2 ", "1_0.5"]),
    "tokens": st.sampled_from(["512", "8k", "32K", " 4 k", "+2k", "0", "-5", "k", "8kk", "", "1.5k"]),
    "path": st.sampled_from(["a.yaml", "/nonexistent/x.gguf", "", ".", "out.html", "-", "~/m.yaml"]),
}


@st.composite
def _lines(draw: st.DrawFn) -> list[str]:
    words = sorted(check_words.WORDS)
    args: list[str] = []
    for word in draw(st.lists(st.sampled_from(words), max_size=6)):
        _, kind, _ = check_words.WORDS[word]
        args.append(word)
        if kind != "flag":
            args.append(draw(_SAMPLES[kind]))
    return args


def _nan_equal(params: dict[str, object]) -> dict[str, object]:
    """NaN (`--acceptance nan`, which the API then refuses) compared as equal to itself."""
    return {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in params.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=_lines())
def test_any_line_it_reads_gives_typers_parameters(args: list[str], tmp_path: Path) -> None:
    os.chdir(tmp_path)  # the relative paths above name nothing here
    quick = check_params(args)
    if quick is not None:
        assert _nan_equal(quick) == _nan_equal(typer_params(args))


def test_unreadable_path_goes_to_typer(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    f = tmp_path / "m.yaml"
    f.write_text("x")
    f.chmod(0)
    assert check_params(["--hardware", str(f)]) is None


def test_a_plain_check_does_not_load_typer() -> None:
    code = ("import sys; sys.argv = ['gemma-fit', 'check', '--gpu', 'a4000', '--model', '9b', '--json']\n"
            "from gemma_fit.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('TYPER' if 'typer' in sys.modules else 'NO TYPER', file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "NO TYPER", out.stderr
    assert '"schema": "gemma-fit.check/1"' in out.stdout
