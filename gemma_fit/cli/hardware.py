"""`gemma-fit probe`, `gemma-fit db validate` and `gemma-fit list models|gpus|quants|cpus`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gemma_fit import api
from gemma_fit.base.errors import EXIT_PROBLEMS
from gemma_fit.cli import state
from gemma_fit.cli.options import JsonOpt

if TYPE_CHECKING:
    from rich.console import Console


def _out() -> Console:
    from gemma_fit.present.terminal import console  # rich only when a table is drawn

    return console()


def _dump(value: object) -> None:
    print(json.dumps(value, indent=2, allow_nan=False))


def probe_command(as_json: JsonOpt = False) -> None:
    """What this machine has: GPUs via NVML, RAM, CPU, disks via psutil."""
    doc = api.probe(state.catalog())
    if as_json:
        _dump(doc)
        return
    from gemma_fit.present.lists_view import render_probe

    render_probe(_out(), doc)


db_app = typer.Typer(no_args_is_help=True, help="Check the hardware and model databases.")


@db_app.command("validate")
def validate_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Files or folders (default: the built-in databases and any --hardware-db/--model-db)."),
    ] = None,
) -> None:
    """Validate hardware and model databases; exit 1 on any problem, one `file:line: field: problem` per line."""
    report = api.validate(list(paths or ()), state.catalog())
    for problem in report.problems:
        print(problem)
    if report.problems:
        print(f"gemma-fit: db validate: {len(report.problems)} problem(s) in {report.summary()}", file=sys.stderr)
        # SystemExit, not typer.Exit: `app(standalone_mode=False)` returns a typer.Exit's code instead of raising
        raise SystemExit(EXIT_PROBLEMS)
    print(f"db validate: ok, {report.summary()}")


list_app = typer.Typer(no_args_is_help=True, help="What the databases hold.")


@list_app.command("gpus")
def list_gpus(
    vendor: Annotated[str | None, typer.Option("--vendor", help="Only nvidia, amd, intel or apple.")] = None,
    min_memory: Annotated[float | None, typer.Option("--min-memory", help="Only GPUs with at least this many "
                                                     "GiB.")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Only this llama.cpp backend: cuda, rocm, "
                                                "vulkan, metal, sycl.")] = None,
    search: Annotated[str | None, typer.Option("--search", "-s", help="Only ids or names containing this "
                                               "text.")] = None,
    unified: Annotated[bool | None, typer.Option("--unified/--discrete", help="Only unified-memory machines, or "
                                                 "only discrete cards.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """The GPUs in the hardware database, with memory, bandwidth and compute (filters keep the list short)."""
    which = api.GpuFilter(vendor, min_memory, backend, search, unified)
    entries = api.gpus(state.catalog(), which)
    if as_json:
        _dump(entries)
        return
    from gemma_fit.present.lists_view import render_gpus

    render_gpus(_out(), entries, filtered=which != api.GpuFilter())


@list_app.command("models")
def list_models(
    generation: Annotated[str | None, typer.Option("--generation", help="Only one generation: 1, 2, 3, 3n "
                                                   "or 4.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Every model in the database."""
    rows = api.models(state.catalog(), generation)
    if as_json:
        _dump(rows)
        return
    from gemma_fit.present.lists_view import render_models

    render_models(_out(), rows)


@list_app.command("quants")
def list_quants(as_json: JsonOpt = False) -> None:
    """The llama.cpp file types gemma-fit knows, with their base tensor type."""
    rows = api.quants()
    if as_json:
        _dump(rows)
        return
    from gemma_fit.present.lists_view import render_quants

    render_quants(_out(), rows)


@list_app.command("cpus")
def list_cpus(as_json: JsonOpt = False) -> None:
    """Every CPU in the hardware database (what --cpu accepts)."""
    rows = api.cpus(state.catalog())
    if as_json:
        _dump(rows)
        return
    from gemma_fit.present.lists_view import render_cpus

    render_cpus(_out(), rows)
