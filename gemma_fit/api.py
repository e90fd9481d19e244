"""The public Python API: what the CLI does, without a subprocess, returning the typed results it renders.

    from gemma_fit import RunSettings, check, to_json
    result = check("gemma-3-12b", "rtx-4070", quant="Q4_K_M", settings=RunSettings(n_ctx=32768))
    print(result.verdict.verdict, result.verdict.max_ctx_fit, to_json(result)["memory"]["devices"])

Bad input raises BadInput (a GemmaFitError, with the one line the CLI would print); nothing prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.engines.base import EngineResult
from gemma_fit.engines.llamacpp import CheckResult, InspectResult
from gemma_fit.hardware.flags import MachineFlags
from gemma_fit.jobs.check import check
from gemma_fit.jobs.inspect import inspect
from gemma_fit.jobs.report import run_report
from gemma_fit.memory.settings import RunSettings
from gemma_fit.present.documents import check_document, inspect_json
from gemma_fit.speed.traffic import Traffic

__all__ = ["BadInput", "CheckResult", "EngineResult", "GemmaFitError", "InspectResult", "MachineFlags", "RunSettings",
           "Traffic", "check", "inspect", "report", "to_json"]


def report(models: str | Sequence[str], gpus: str | Sequence[str] = (), *, quants: Sequence[str] = ("Q4_K_M",),
           contexts: Sequence[int] = (4096,), settings: RunSettings | None = None,
           hardware_files: Sequence[Path] = (), engine: str = "llama.cpp", what_to_buy: bool = False,
           model_dirs: tuple[Path, ...] = (), hardware_dirs: tuple[Path, ...] = (),
           machine: MachineFlags | None = None) -> dict[str, Any]:
    """The check over every hardware config x model x quant x context: the gemma-fit.report/1 document
    (`report --json`). Each entry of `gpus` is one config: a GPU id, or ids joined by '+' for one
    multi-GPU machine; `hardware_files` adds machine files, one config each."""
    names = [models] if isinstance(models, str) else list(models)
    configs = [[gpus]] if isinstance(gpus, str) else [[g] for g in gpus]
    return run_report(names, list(quants), configs, list(contexts), settings or RunSettings(),
                      hardware_files=list(hardware_files), model_dirs=model_dirs, hardware_dirs=hardware_dirs,
                      what_to_buy=what_to_buy, engine=engine, machine=machine)


def to_json(result: CheckResult | EngineResult | InspectResult | dict[str, Any]) -> dict[str, Any]:
    """The contract's JSON document of a result, as `--json` prints it (a report is one already)."""
    if isinstance(result, InspectResult):
        return inspect_json(result)
    if isinstance(result, dict):
        return result
    return check_document(result)
