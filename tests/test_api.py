"""The public Python API (`from gemma_fit import check, report, inspect, to_json`): the typed results the
CLI renders, the same documents its --json prints, errors as exceptions, and a cheap `import gemma_fit`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gemma_fit
from gemma_fit import (
    BadInput,
    CheckResult,
    GemmaFitError,
    InspectResult,
    RunSettings,
    check,
    inspect,
    report,
    to_json,
)

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def cli_json(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gemma_fit", *args], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode in (0, 3, 4), done.stderr
    return done.stdout


def test_check_returns_the_typed_result_the_cli_prints() -> None:
    result = check("9b", "a4000", quant="Q5_K_M", settings=RunSettings(n_ctx=8192))
    assert isinstance(result, CheckResult)
    assert result.verdict == "go" and result.resolved.spec.id == "gemma-2-9b"
    assert result.n_ctx == 8192 and result.detail.estimate.n_ctx == 8192
    text = json.dumps(to_json(result), indent=2) + "\n"
    assert text == cli_json("check", "--gpu", "a4000", "--model", "9b", "--quant", "Q5_K_M", "--ctx", "8192",
                            "--json")


def test_check_on_a_machine_file_and_on_several_gpus() -> None:
    machine = check("27b", EXAMPLES / "workstation.yaml")
    assert isinstance(machine, CheckResult) and len(machine.hardware.gpus) == 2
    assert machine.detail.estimate.host.capacity_bytes == machine.hardware.host_capacity_bytes == 128 * 2**30
    pair = check("gemma-3-27b", ["rtx-4090", "rtx-4090"], quant="Q8_0")
    assert [d.id for d in pair.detail.estimate.devices] == ["rtx-4090", "rtx-4090"]


@pytest.mark.parametrize("engine", ["vllm", "ollama", "transformers"])
def test_other_engines_return_the_same_result_shape(engine: str) -> None:
    result = check("gemma-3-12b", "rtx-4090", engine=engine, default_ctx=True, default_parallel=True)  # as the CLI
    assert isinstance(result, CheckResult) and result.engine == engine
    text = json.dumps(to_json(result), indent=2) + "\n"
    assert text == cli_json("check", "--gpu", "rtx-4090", "--model", "gemma-3-12b", "--engine", engine, "--json")


def test_report_is_the_cli_report_document() -> None:
    doc = report(["9b", "gemma-3-4b"], ["a4000", "rtx-4090+rtx-4090"], quants=["Q4_K_M", "Q8_0"])
    assert doc["schema"] == "gemma-fit.report/1" and len(doc["cells"]) == 8
    text = json.dumps(doc, indent=2) + "\n"
    assert text == cli_json("report", "--model", "9b", "--model", "gemma-3-4b", "--gpu", "a4000",
                            "--gpu", "rtx-4090+rtx-4090", "--quant", "Q4_K_M", "--quant", "Q8_0", "--json")


def test_inspect_reads_a_header_and_checks_it_on_hardware(tmp_path: Path) -> None:
    gguf = tmp_path / "270m.gguf"
    subprocess.run([sys.executable, "-m", "gemma_fit", "synth", str(gguf), "--model", "gemma-3-270m"], check=True,
                   capture_output=True, timeout=300)
    alone = inspect(gguf)
    assert isinstance(alone, InspectResult) and alone.check is None
    assert alone.spec.arch == "gemma3" and alone.plan.ftype.name == "Q4_K_M"
    assert json.dumps(to_json(alone), indent=2) + "\n" == cli_json("inspect", str(gguf), "--json")
    there = inspect(gguf, "a4000", settings=RunSettings(n_ctx=2048))
    assert there.check is not None and there.check.n_ctx == 2048
    assert (json.dumps(to_json(there), indent=2) + "\n"
            == cli_json("inspect", str(gguf), "--gpu", "a4000", "--ctx", "2048", "--json"))


@pytest.mark.parametrize("call", [
    lambda: check("nope", "a4000"),
    lambda: check("9b", "no-such-gpu"),
    lambda: check("9b", "a4000", quant="Q9_K"),
    lambda: check("9b", "a4000", settings=RunSettings(n_ctx=-1)),
    lambda: check("9b", "a4000", engine="tgi"),
    lambda: report(["9b"], ["a4000"], quants=["nope"]),
])
def test_bad_input_raises_one_line_errors(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadInput) as info:
        call()
    assert isinstance(info.value, GemmaFitError) and "\n" not in str(info.value)


def test_importing_gemma_fit_loads_no_pipeline() -> None:
    code = ("import sys, gemma_fit; print(sorted(m for m in sys.modules if m.startswith('gemma_fit.') "
            "and not m.startswith('gemma_fit.base')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]"
    assert gemma_fit.__version__ and gemma_fit.LLAMA_CPP_COMMIT
    with pytest.raises(AttributeError):
        gemma_fit.no_such_name  # noqa: B018
