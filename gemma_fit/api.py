"""The public Python API: every command of the CLI as a function returning its typed result; the CLI is a
front-end over these and the presenters.

    from gemma_fit import RunSettings, check, to_json
    result = check("gemma-3-12b", "rtx-4070", quant="Q4_K_M", settings=RunSettings(n_ctx=32768))
    print(result.verdict, result.max_ctx_fit, to_json(result)["memory"]["devices"])

Bad input raises BadInput (a GemmaFitError, with the one line the CLI would print); nothing prints. Every
function takes `catalog` (the databases: the built-in ones plus extra folders) and reads nothing else.
Each job is imported inside its function, so `import gemma_fit.api` stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.base import CheckResult, Workload
from gemma_fit.engines.llamacpp import InspectResult
from gemma_fit.hardware.flags import MachineFlags
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.needs import SEGMENTS, BuyNeeds, Needs
from gemma_fit.memory.settings import RunSettings, Speculative
from gemma_fit.speed.traffic import Traffic

if TYPE_CHECKING:
    from gemma_fit.hardware.cluster import Cluster
    from gemma_fit.jobs.bench import BenchResult, BenchRun
    from gemma_fit.jobs.buy import Purchase
    from gemma_fit.jobs.cost import CostAsk
    from gemma_fit.jobs.lists import GpuFilter
    from gemma_fit.jobs.recommend import Recommendation
    from gemma_fit.jobs.smoke import SmokeResult, SmokeRun
    from gemma_fit.jobs.validate.common import Report as ValidationReport

# Types the callers build (needs, filters, runs) from modules a cold `check` does not load: imported when first
# asked for (gemma_fit.api.Needs), so that `import gemma_fit.api` stays cheap.
_LAZY_TYPES = {"CostAsk": "gemma_fit.jobs.cost", "BenchRun": "gemma_fit.jobs.bench",
               "BenchResult": "gemma_fit.jobs.bench",
               "Recommendation": "gemma_fit.jobs.recommend", "Purchase": "gemma_fit.jobs.buy",
               "SmokeRun": "gemma_fit.jobs.smoke", "SmokeResult": "gemma_fit.jobs.smoke",
               "GpuFilter": "gemma_fit.jobs.lists", "Cluster": "gemma_fit.hardware.cluster"}


def __getattr__(name: str) -> Any:
    module = _LAZY_TYPES.get(name)
    if module is None:
        raise AttributeError(f"module 'gemma_fit.api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["BUILTIN", "BadInput", "Speculative", "Catalog", "CheckResult", "GemmaFitError", "Hardware", "InspectResult",
           "MachineFlags", "RunSettings", "Traffic", "Verdict", "Workload", "buy", "check", "check_page", "cpus",
           "gpus", "inspect", "load_cluster", "models", "probe", "quants", "recommend", "report", "report_page",
           "serve_plan", "smoke", "synth", "to_json", "validate", "buy_page", "margin_bytes", "record_smoke", "Needs",
           "BuyNeeds", "SEGMENTS", "bench", "BenchRun", "BenchResult", "cost", "CostAsk", "cost_page"]

HardwareArg = Hardware | str | Sequence[str] | Path


def check(model: str | None, hardware: HardwareArg, *, quant: str | None = None, gguf: Path | None = None,
          settings: RunSettings | None = None, engine: str = "llama.cpp", workload: Workload | None = None,
          backend: str | None = None, machine: MachineFlags | None = None, margin_gib: float | None = None,
          options: Mapping[str, Any] | None = None, default_ctx: bool = False, default_parallel: bool = False,
          engine_version: str | None = None, catalog: Catalog = BUILTIN) -> CheckResult[Any]:
    """Will `model` (an id, alias, config.json or Ollama tag; or a real GGUF as `gguf`) run on `hardware` (GPU ids,
    'local', 'cpu', a machine file, or a Hardware), with these settings, on this engine, and how well.
    `default_ctx`: the context was not given, so the engine's own default stands (llama.cpp: 4096); with
    `default_parallel` (no --parallel either), the answer is for what the engine (`engine_version`, else the one
    gemma-fit's rules are read from) does with its own defaults: llama-server's fitted context and auto slots.
    Without `default_parallel`, `settings.n_parallel` is asked for even at 1 (vLLM: --max-num-seqs 1, not its own
    default)."""
    from gemma_fit.jobs.check import check as run

    return run(model, hardware, quant=quant, gguf=gguf, settings=settings, engine=engine, workload=workload,
               backend=backend, machine=machine, margin_gib=margin_gib, options=options, default_ctx=default_ctx,
               default_parallel=default_parallel, engine_version=engine_version,
               catalog=catalog)


def inspect(path: Path | str, hardware: HardwareArg | None = None, *, settings: RunSettings | None = None,
            prompt_tokens: int = 512, mmproj: Path | None = None, backend: str | None = None,
            catalog: Catalog = BUILTIN) -> InspectResult:
    """What a GGUF file holds (its header only) and, with `hardware`, its check there."""
    from gemma_fit.jobs.inspect import inspect as run

    return run(path, hardware, settings=settings, prompt_tokens=prompt_tokens, mmproj=mmproj, backend=backend,
               catalog=catalog)


def report(models: str | Sequence[str], gpus: str | Sequence[str] = (), *, quants: Sequence[str] = (),
           contexts: Sequence[int] = (), settings: RunSettings | None = None, hardware_files: Sequence[Path] = (),
           engine: str = "llama.cpp", what_to_buy: bool = False, machine: MachineFlags | None = None,
           progress: Callable[[int, int], None] | None = None, catalog: Catalog = BUILTIN) -> dict[str, Any]:
    """The check over every hardware config x model x quant x context: the gemma-fit.report/1 document. Each entry
    of `gpus` is one config: a GPU id, ids joined by '+' for one multi-GPU machine, commas for several configs,
    or 'all'; `hardware_files` adds machine files, one config each."""
    from gemma_fit.jobs.report import gpu_configs, run_report

    names = [models] if isinstance(models, str) else list(models)
    configs = gpu_configs([gpus] if isinstance(gpus, str) else list(gpus), catalog)
    return run_report(names, list(quants), configs, list(contexts), settings or RunSettings(),
                      hardware_files=list(hardware_files), catalog=catalog, what_to_buy=what_to_buy, progress=progress,
                      engine=engine, machine=machine)


def recommend(hardware: HardwareArg, needs: Needs, *, settings: RunSettings | None = None,
              engine: str = "llama.cpp", backend: str | None = None, machine: MachineFlags | None = None,
              catalog: Catalog = BUILTIN) -> Recommendation:
    """The best Gemma configurations for `hardware` and `needs`, ranked."""
    from gemma_fit.hardware.select import hardware_of
    from gemma_fit.jobs.recommend import recommend as run

    hw = hardware_of(hardware, backend, catalog.hardware_dirs, machine)
    return run(hw, needs, settings, engine, catalog)


def buy(models: Sequence[str], quant: str, needs: BuyNeeds, *, prices: Path | None = None,
        catalog: Catalog = BUILTIN) -> Purchase:
    """What to buy for `models` (any of them) at `quant` ('auto': each option's best), cheapest first."""
    from gemma_fit.jobs.buy import buy as run
    from gemma_fit.jobs.report import expand_models

    if not models:
        raise BadInput("--model is required (an id or alias; repeat it for several)")
    return run(expand_models(models, catalog), quant, needs, catalog=catalog, prices_file=prices)


def load_cluster(path: Path, catalog: Catalog = BUILTIN) -> Cluster | None:
    """The cluster a file describes, or None when it is a machine file."""
    from gemma_fit.hardware.cluster_file import load_cluster as load

    return load(path, catalog.hardware_dirs)


def serve_plan(model: str, *, quant: str | None = None, gpus: Sequence[str] = (), hardware: Path | None = None,
               engine: str = "llama.cpp", ctx: int | None = None, parallel: int = 1, prompt_tokens: int = 512,
               output_tokens: int | None = 256, rate: float | None = None, tensor_parallel_size: int | None = None,
               pipeline_parallel_size: int | None = None, speculative: Speculative | None = None,
               catalog: Catalog = BUILTIN) -> dict[str, Any]:
    """Many requests at once on one machine or a cluster file: the gemma-fit.serve-plan/1 document (`speculative`:
    --mtp / --draft as asked, one machine with llama.cpp)."""
    from gemma_fit.jobs.serve_plan import plan_document

    cluster = load_cluster(hardware, catalog) if hardware is not None else None
    if cluster is None and (tensor_parallel_size or pipeline_parallel_size) and engine.strip().lower() != "vllm":
        raise BadInput("--tensor-parallel-size / --pipeline-parallel-size are vLLM's")
    return plan_document(model=model, quant=quant, gpus=list(gpus), hardware=hardware, cluster=cluster,
                         engine=engine, ctx=ctx, parallel=parallel, prompt_tokens=prompt_tokens,
                         output_tokens=output_tokens, rate=rate, tp=tensor_parallel_size,
                         pp=pipeline_parallel_size, speculative=speculative, catalog=catalog)


def smoke(model: str | None, quant: str, settings: RunSettings, run: SmokeRun, *, gguf: Path | None = None,
          gpus: Sequence[str] = (), catalog: Catalog = BUILTIN) -> SmokeResult:
    """Run llama.cpp (a real GGUF, or a zero-weight file of `model`) and set its measurement beside the estimate."""
    from gemma_fit.jobs.smoke import smoke as run_smoke

    return run_smoke(model, quant, settings, run, gguf=gguf, gpus=tuple(gpus), catalog=catalog)


def bench(model: str | None, quant: str, run: BenchRun, *, gguf: Path | None = None, gpus: Sequence[str] = (),
          save: bool = False, catalog: Catalog = BUILTIN) -> BenchResult:
    """Run llama-bench (and llama-batched-bench) here, or read a pasted table, beside the speed model's prediction of
    each test; with `save`, keep them as this machine's calibration, which later answers for it use."""
    from gemma_fit.jobs.bench import bench as run_bench

    return run_bench(model, quant, run, gguf=gguf, gpus=tuple(gpus), save=save, catalog=catalog)


def cost(model: str, quant: str | None, hardware: HardwareArg, ask: CostAsk, *, machine: MachineFlags | None = None,
         catalog: Catalog = BUILTIN) -> dict[str, Any]:
    """Buying `hardware` vs renting the same GPUs vs a hosted API for `model` at the asked volume: the
    gemma-fit.cost/1 document (options cheapest first, where the cheapest changes, the chart's series)."""
    from gemma_fit.jobs.cost import cost as run
    from gemma_fit.jobs.cost import cost_document

    result, kwh = run(model, quant, hardware, ask, catalog=catalog, machine=machine)
    return cost_document(result, kwh)


def record_smoke(result: SmokeResult) -> Path:
    """Append a smoke result to this machine's records (gemma-fit's data folder) and its measured speed to this
    machine's calibration (as `bench --save`); the records file written."""
    from gemma_fit.jobs.smoke import record_smoke as record

    return record(to_json(result), result)


def synth(out: Path, model: str, quant: str = "Q4_K_M", catalog: Catalog = BUILTIN) -> tuple[str, str, int, int]:
    """Write a zero-weight GGUF of the model's exact layout (sparse). Returns (model id, quant, tensors, bytes)."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.gguf.writer import write_synthetic_gguf  # imports gguf and numpy: only when writing
    from gemma_fit.model.catalog import resolve_model

    resolved = resolve_model(model, catalog.model_dirs)
    plan = build_plan(resolved.spec, quant)
    return resolved.spec.id, plan.ftype.name, len(plan.tensors), write_synthetic_gguf(plan, Path(out))


def probe(catalog: Catalog = BUILTIN) -> dict[str, Any]:
    """What this machine has: GPUs through NVML, RAM, CPU, disks (gemma-fit.probe/1)."""
    from gemma_fit.hardware.probe import probe as run

    return run(extra_dirs=catalog.hardware_dirs)


def validate(paths: Sequence[Path] = (), catalog: Catalog = BUILTIN) -> ValidationReport:
    """Validate database files or folders (default: the built-in databases and the catalog's extra folders)."""
    from gemma_fit.db.files import packaged_dir
    from gemma_fit.jobs.validate import validate as run

    missing = [p for p in paths if not Path(p).exists()]
    if missing:  # nothing to validate is bad input (exit 2), not a database problem (exit 1)
        raise BadInput(f"db validate: no such file or folder: {missing[0]}")
    roots = list(paths) or [packaged_dir("hardware_db"), packaged_dir("model_db"), *catalog.hardware_dirs,
                            *catalog.model_dirs]
    return run(roots)


def models(catalog: Catalog = BUILTIN, generation: str | None = None) -> list[dict[str, Any]]:
    """Every model in the database (or one generation's)."""
    from gemma_fit.jobs.lists import models as rows

    return rows(catalog, generation)


def gpus(catalog: Catalog = BUILTIN, which: GpuFilter | None = None) -> list[dict[str, Any]]:
    """Every GPU in the hardware database that `which` keeps, as its database entry (JSON-ready)."""
    from gemma_fit.jobs.lists import gpus as entries

    return [e.model_dump(mode="json") for e in entries(catalog, which)]


def quants() -> list[dict[str, Any]]:
    """The llama.cpp file types gemma-fit knows, with their base tensor type."""
    from gemma_fit.jobs.lists import quants as rows

    return rows()


def cpus(catalog: Catalog = BUILTIN) -> list[dict[str, Any]]:
    """Every CPU in the hardware database (what --cpu accepts)."""
    from gemma_fit.jobs.lists import cpus as rows

    return rows(catalog)


def check_page(result: CheckResult[Any], catalog: Catalog = BUILTIN, extra: dict[str, Any] | None = None) -> str:
    """The self-contained HTML page of a check (`check --html`)."""
    from gemma_fit.jobs.check_page import check_page as page

    return page(result, catalog, extra)


def report_page(report_doc: dict[str, Any]) -> str:
    """The self-contained HTML page of a report document (`report --html`)."""
    from gemma_fit.present.html import render_report_html

    return render_report_html(report_doc)


def cost_page(cost_doc: dict[str, Any]) -> str:
    """The self-contained HTML page of a cost document (`cost --html`): the answer, its chart, every source."""
    from gemma_fit.present.cost_html import render_cost_html

    return render_cost_html(cost_doc)


def buy_page(buy_doc: dict[str, Any]) -> str:
    """The self-contained HTML page of a buy document (`buy --html`)."""
    from gemma_fit.present.html import render_buy_html

    return render_buy_html(buy_doc)


def margin_bytes(margin_gib: float | None) -> int:
    """--margin GiB as bytes (llama.cpp's fit target, 1 GiB, when not given); BadInput out of range."""
    from gemma_fit.jobs.inputs import margin_bytes as to_bytes

    return to_bytes(margin_gib)


def to_json(result: Any) -> dict[str, Any]:
    """The contract's JSON document of any result, as `--json` prints it (a report is one already)."""
    if isinstance(result, dict):
        return result
    if isinstance(result, CheckResult):
        from gemma_fit.present.documents import check_document

        return check_document(result)
    if isinstance(result, InspectResult):
        from gemma_fit.present.documents import inspect_json

        return inspect_json(result)
    return _job_document(result)


def _job_document(result: Any) -> dict[str, Any]:
    from gemma_fit.jobs.bench import BenchResult, bench_document
    from gemma_fit.jobs.buy import Purchase, buy_document
    from gemma_fit.jobs.recommend import Recommendation, recommend_document
    from gemma_fit.jobs.smoke import SmokeResult, smoke_document

    if isinstance(result, Recommendation):
        return recommend_document(result)
    if isinstance(result, Purchase):
        return buy_document(result)
    if isinstance(result, SmokeResult):
        return smoke_document(result)
    if isinstance(result, BenchResult):
        return bench_document(result)
    raise TypeError(f"no document for {type(result).__name__}")
