"""A new user's first five minutes: token counts with k, a suggestion for every mistyped id, chip names sold in
several sizes refused with the list, tables that never cut an id at 80 columns, help that gives every option a
meaning and its default, buy --html."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gemma_fit import api
from gemma_fit.base.ranges import RANGES, check_range
from gemma_fit.base.suggest import closest
from gemma_fit.base.verdict import Verdict
from gemma_fit.engines.registry import ENGINES, engine_named

ENV80 = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}, "COLUMNS": "80",
         "NO_COLOR": "1", "TERM": "dumb"}
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gemma_fit", *args], capture_output=True, text=True, env=ENV80,
                          timeout=600, check=False)


def test_token_counts_take_k() -> None:
    import json

    done = cli("check", "--gpu", "rtx-4090", "--model", "gemma-3-4b", "--ctx", "32k", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["settings"]["n_ctx"] == 32768
    bad = cli("check", "--gpu", "rtx-4090", "--model", "gemma-3-4b", "--ctx", "8x")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "token count" in bad.stderr


@pytest.mark.parametrize(("args", "suggested"), [
    (("check", "--gpu", "a4000", "--model", "gema-3-27b"), "gemma-3-27b"),
    (("check", "--gpu", "a4000", "--model", "9b", "--quant", "Q4_K_XL"), "UD-Q4_K_XL"),
    (("check", "--gpu", "rtx-409", "--model", "9b"), "rtx-4090"),
    (("check", "--gpu", "cpu", "--model", "1b", "--cpu", "ryzen 9 7950"), "7950"),
    (("check", "--gpu", "a4000", "--model", "9b", "--engine", "vlm"), "vllm"),
    (("check", "--gpu", "cpu", "--model", "1b", "--disk", "nvme-gen9"), "nvme-gen"),
    (("recommend", "--gpu", "a4000", "--prefer", "qualty"), "quality"),
    (("buy", "--model", "9b", "--segment", "consmer"), "consumer"),
])
def test_every_mistyped_id_gets_a_suggestion(args: tuple[str, ...], suggested: str) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "did you mean" in line and suggested.lower() in line.lower(), line


@pytest.mark.parametrize("typed", ["gemma3-27b", "Gemma 3 27B", "gemma_3_27b", "google/gemma-3-27b-it",
                                   "GEMMA-3-27B-IT"])
def test_model_names_as_people_type_them(typed: str) -> None:
    assert api.check(typed, "rtx-4090").resolved.spec.id == "gemma-3-27b"


@pytest.mark.parametrize(("typed", "ids"), [("m4-max", {"m4-max-36gb", "m4-max-128gb"}),
                                            ("a100", {"a100-40gb-sxm", "a100-80gb-sxm"}),
                                            ("rtx-4060-ti", {"rtx-4060-ti-8gb", "rtx-4060-ti-16gb"})])
def test_a_chip_sold_in_several_sizes_is_refused_with_the_list(typed: str, ids: set[str]) -> None:
    with pytest.raises(api.BadInput, match="sold in several configurations") as err:
        api.check("9b", typed)
    assert all(i in str(err.value) for i in ids)
    assert api.check("9b", "NVIDIA H200").hardware.gpus[0].id == "h200-sxm"  # what the driver reports is one card


@pytest.mark.parametrize("args", [("recommend", "--gpu", "rtx-3090", "--ctx", "8k"),
                                  ("buy", "--model", "gemma-3-27b", "--ctx", "32k"),
                                  ("list", "gpus"), ("list", "models"), ("list", "cpus"),
                                  ("report", "--gpu", "rtx-4090", "--gpu", "a4000", "--model", "all")])
def test_no_id_is_cut_at_80_columns(args: tuple[str, ...]) -> None:
    done = cli(*args)
    assert done.returncode in (0, 3, 4), done.stderr
    out = ANSI.sub("", done.stdout)
    assert "…" not in out
    known = {m["id"] for m in api.models()} | {g["id"] for g in api.gpus()} | {c["id"] for c in api.cpus()}
    words = set(re.findall(r"[\w.+-]+", out))
    for line in out.splitlines():  # an id that starts a row is whole on its line
        first = line.split()[0] if line.split() else ""
        if any(first and k.startswith(first) and k != first for k in known) and first not in known:
            pytest.fail(f"a cut id: {line!r}")
    assert words & known


def test_help_gives_every_option_a_meaning() -> None:
    for command in ("check", "report", "recommend", "buy", "serve-plan", "inspect", "smoke"):
        done = cli(command, "--help")
        assert done.returncode == 0
        text = ANSI.sub("", done.stdout)
        options = re.findall(r"(--[a-z][a-z0-9-]+)", text)
        assert options, command
        for line in text.splitlines():  # no option explained by one word
            m = re.match(r"^\W*(--[a-z][a-z0-9-]+)(?:,?\s+-\S+)?\s+(?:[A-Z<][\w\[\]<>.|]*\s+)?(.+?)\W*$", line)
            if m and m.group(2) and not m.group(2).startswith("["):
                assert len(m.group(2).split()) >= 2 or m.group(2).startswith("--"), (command, line)


def test_help_shows_the_defaults_it_states() -> None:
    """Typer reads help as rich markup, where "[default: ...]" is a tag and vanished: each is escaped."""
    done = subprocess.run([sys.executable, "-m", "gemma_fit", "check", "--help"], capture_output=True, text=True,
                          env={**ENV80, "COLUMNS": "200"}, timeout=600, check=False)
    text = ANSI.sub("", done.stdout)
    assert "[default: 1, llama.cpp's fit target]" in text and "[default: 0.92]" in text
    assert "\\[" not in text


def test_buy_writes_a_self_contained_page(tmp_path: Path) -> None:
    out = tmp_path / "buy.html"
    done = cli("buy", "--model", "gemma-3-27b", "--ctx", "32k", "--budget", "2000", "--html", str(out), "--json")
    assert done.returncode == 0, done.stderr
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "What to buy for gemma-3-27b" in page
    assert "src=\"http" not in page and "<script" not in page


def test_list_filters() -> None:
    apple = api.gpus(which=api.GpuFilter(vendor="apple", min_memory_gib=64))
    assert apple and all(g["vendor"] == "apple" and g["memory_bytes"] >= 64 * 2**30 for g in apple)
    assert {m["id"] for m in api.models(generation="3n")} == {"gemma-3n-E2B", "gemma-3n-E4B"}
    with pytest.raises(api.BadInput, match="--vendor"):
        api.gpus(which=api.GpuFilter(vendor="nvidiaa"))


def test_one_verdict_vocabulary() -> None:
    assert [v.value for v in sorted(Verdict, key=lambda v: v.rank)] == ["go", "tight", "offload", "no-go"]
    assert [v.exit_code for v in Verdict] == [0, 0, 3, 4]
    assert Verdict.worst([Verdict.GO, Verdict.OFFLOAD, Verdict.TIGHT]) == Verdict.OFFLOAD


def test_one_registry_of_engines() -> None:
    assert list(ENGINES) == ["llama.cpp", "ollama", "vllm", "transformers"]
    assert engine_named("llamacpp").name == "llama.cpp" and engine_named(" VLLM ").name == "vllm"
    with pytest.raises(api.BadInput, match="is an option of vllm, not of ollama"):
        api.check("gemma-3-4b", "rtx-4090", engine="ollama", options={"tensor_parallel_size": 2})
    for name in ENGINES:  # every engine answers with the one result shape
        assert isinstance(api.check("gemma-3-4b", "rtx-4090", engine=name), api.CheckResult)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1, True, "3", 1e300])
def test_one_range_table(bad: object) -> None:
    with pytest.raises(api.BadInput):
        check_range("--prompt-tokens", bad)
    assert all(r.low <= r.high for r in RANGES.values())


def test_suggestions_prefer_what_contains_the_typed_text() -> None:
    assert closest("gemma-4-26b", ["gemma-4-E2B", "gemma-4-26B-A4B", "gemma-4-12B"])[0] == "gemma-4-26B-A4B"
    assert closest("", ["a"]) == []


# --- start-up: only the command that runs is built -------------------------------------------------------------

def _help(app: object, args: list[str]) -> tuple[int, str]:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, args, prog_name="gemma-fit", env={"COLUMNS": "100"})  # type: ignore[arg-type]
    return result.exit_code, result.output


def test_a_named_command_runs_in_an_app_of_its_own_with_the_same_help() -> None:
    from gemma_fit.cli.app import _command_name, _registered_name, app, app_for

    names = [_registered_name(c) for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert {"check", "report", "recommend", "buy", "serve-plan", "list", "db"} <= set(names)
    for name in names:
        one = app_for([name, "--help"])
        assert one is not app and [_registered_name(c) for c in one.registered_commands] + \
            [g.name for g in one.registered_groups] == [name]
        assert _help(one, [name, "--help"]) == _help(app, [name, "--help"]), name
    assert _command_name(["--model-db", "x", "--hardware-db=y", "check", "--gpu", "t4"]) == "check"
    for args in ([], ["--help"], ["--version"], ["chek"], ["--model-db", "x"], ["--bogus", "check"]):
        assert app_for(args) is app, args  # help, typos and errors: the whole app answers


def test_the_top_help_puts_the_questions_first() -> None:
    """`gemma-fit --help`: check is the first command, in a panel of the questions (before files and databases)."""
    from gemma_fit.cli.app import app

    code, text = _help(app, ["--help"])
    words = [m.group(1) for m in re.finditer(r"^│ ([a-z-]+)\s", text, re.MULTILINE)]
    commands = [w for w in words if w in {"check", "recommend", "buy", "report", "serve-plan", "inspect", "synth",
                                          "smoke", "probe", "list", "db"}]
    assert code == 0 and commands[:5] == ["check", "recommend", "buy", "report", "serve-plan"], commands
    assert text.index("Will it run") < text.index("Files, this machine")


@pytest.mark.parametrize("typed", ["gemma3:27b", "gemma3:27b-it-q8_0", "gemma3:27b-it-qat"])
def test_ollama_tags_name_a_model_in_every_command(typed: str) -> None:
    from gemma_fit.model.catalog import resolve_model

    assert resolve_model(typed).spec.id == "gemma-3-27b"
    for args in (("report", "--gpu", "rtx-4090", "--model", typed, "--quant", "Q4_K_M", "--json"),
                 ("serve-plan", "--gpu", "rtx-4090", "--model", typed, "--json")):
        done = cli(*args)
        assert done.returncode != 2 and not done.stderr.strip(), done.stderr  # an answer, whatever its verdict


def test_the_tags_recommend_prints_are_read_back_with_their_quant() -> None:
    import json

    done = cli("check", "--gpu", "rtx-4090", "--model", "gemma4:31b-it-q8_0", "--json")
    assert json.loads(done.stdout)["model"]["quant"] == "Q8_0", done.stderr
    clash = cli("check", "--gpu", "rtx-4090", "--model", "gemma4:31b-it-q8_0", "--quant", "Q4_K_M")
    assert clash.returncode == 2 and "is Q8_0, not Q4_K_M" in clash.stderr


@pytest.mark.parametrize(("args", "shown"), [
    (("list", "gpus", "--backend", "vulkn"), "vulkan"),
    (("list", "gpus", "--vendor", "nvida"), "nvidia"),
    (("recommend", "--gpu", "rtx-4090", "--draft", "gema-3-12b"), "gemma-3-12b"),
    (("recommend", "--gpu", "rtx-4090", "--draft-max", "3"), "--mtp or --draft"),
    (("check", "--gpu", "rtx-30", "--model", "9b"), "(gemma-fit list gpus)"),  # 14 ids start so: some named, all listed
    (("check", "--gpu", "jetson-orin-nano", "--model", "1b"), "jetson-orin-nano-super"),
])
def test_a_filter_or_ask_nothing_can_match_is_refused(args: tuple[str, ...], shown: str) -> None:
    done = cli(*args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and shown in done.stderr, done.stderr


def test_buy_keeps_the_plan_at_80_columns() -> None:
    done = cli("buy", "--model", "gemma-4-26B-A4B", "--quant", "auto", "--allow-offload", "--max-gpus", "2",
               "--segment", "workstation")
    header = next(line for line in done.stdout.splitlines() if "hardware (--gpu)" in line)
    assert "plan" in header and max(len(line) for line in done.stdout.splitlines()[2:8]) <= 80


@pytest.mark.parametrize("args", [
    ("check", "--gpu", "rtx-4090", "--model", "9b", "--engine", "transformers", "--max-new-tokens", "1k", "--json"),
    ("check", "--gpu", "h100-sxm", "--model", "9b", "--engine", "vllm", "--max-num-batched-tokens", "8K", "--json"),
    ("buy", "--model", "9b", "--tokens-per-day", "32k", "--json"),
])
def test_every_token_count_takes_k(args: tuple[str, ...]) -> None:
    done = cli(*args)
    assert done.returncode != 2 and not done.stderr.strip(), done.stderr


def test_an_explicit_parallel_1_is_vllms_max_num_seqs_1() -> None:
    base = ("check", "--gpu", "h100-sxm", "--model", "9b", "--engine", "vllm", "--quant", "bf16")
    assert "--max-num-seqs 1 " in cli(*base, "--parallel", "1").stdout
    assert "--max-num-seqs 1024" in cli(*base).stdout  # unset: vLLM's own default for the GPU


@pytest.mark.parametrize(("args", "hint"), [
    (("--cache-type-k", "q8"), "did you mean q8_0?"),
    (("--cache-type-v", "f61"), "did you mean f16"),
    (("--flash-attn", "of"), "did you mean off?"),
])
def test_llama_cpp_flag_values_get_a_suggestion(args: tuple[str, ...], hint: str) -> None:
    done = cli("check", "--gpu", "rtx-4090", "--model", "9b", *args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and hint in done.stderr, done.stderr
