"""Typer pieces for the hardware side of the CLI: `probe`, `db validate`, `list gpus`.

gemma_fit/cli.py registers them:
    app.command("probe")(probe_command)
    app.add_typer(db_app, name="db")
    list_app.command("gpus")(list_gpus)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gemma_fit.base.errors import EXIT_PROBLEMS, BadInput
from gemma_fit.base.units import GIB, fmt_bytes
from gemma_fit.cli.state import hardware_dirs, model_dirs
from gemma_fit.db.files import packaged_dir

if TYPE_CHECKING:
    from rich.console import Console

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


def _out() -> Console:
    from gemma_fit.present.terminal import console  # rich only when a table is drawn

    return console()


def _num(value: float | None, fmt: str = "{:g}") -> str:
    return "-" if value is None else fmt.format(value)


# --- probe ------------------------------------------------------------------------------------


def probe_command(as_json: JsonOpt = False) -> None:
    """What this machine has: GPUs via NVML, RAM, CPU, disks via psutil."""
    from gemma_fit.hardware.probe import probe

    doc = probe(extra_dirs=hardware_dirs())
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    out = _out()
    _print_gpus(out, doc)
    out.print(f"RAM: {fmt_bytes(doc['ram_total_bytes'])} total, {fmt_bytes(doc['ram_available_bytes'])} available")
    freq = f", {doc['cpu_freq_mhz']:.0f} MHz" if doc.get("cpu_freq_mhz") else ""
    out.print(f"CPU: {doc['cpu_count']} logical cores ({doc.get('cpu_physical_cores') or '?'} physical){freq}")
    _print_disks(out, doc["disks"])
    for note in doc["notes"]:
        out.print(f"note: {note}")


def _print_gpus(out: Console, doc: dict[str, Any]) -> None:
    if not doc["gpus"]:
        out.print("GPUs: none found")
        return
    cuda = f", CUDA {doc['cuda_driver_version']}" if doc.get("cuda_driver_version") else ""
    out.print(f"NVIDIA driver {doc.get('driver_version') or '?'}{cuda}")
    from rich.table import Table

    table = Table("#", "name", "database id", "total", "free", "PCIe", "processes")
    for g in doc["gpus"]:
        pcie = f"Gen{g['pcie_gen']} x{g['pcie_width']}" if g.get("pcie_gen") and g.get("pcie_width") else "-"
        total = fmt_bytes(g["total_bytes"]) if g.get("total_bytes") is not None else "-"
        free = fmt_bytes(g["free_bytes"]) if g.get("free_bytes") is not None else "-"
        table.add_row(str(g["index"]), g["name"], g.get("matched_id") or "(not in database)", total, free, pcie,
                      str(len(g.get("processes", []))))
    out.print(table)


def _print_disks(out: Console, disks: list[dict[str, Any]]) -> None:
    if not disks:
        return
    from rich.table import Table

    table = Table("disk", "mount point", "kind", "size", "free")
    for d in disks:
        table.add_row(d["device"], d["mountpoint"], d.get("kind") or "?", fmt_bytes(d["total_bytes"]),
                      fmt_bytes(d["free_bytes"]))
    out.print(table)


# --- db validate ------------------------------------------------------------------------------

db_app = typer.Typer(no_args_is_help=True, help="Check the hardware and model databases.")


@db_app.command("validate")
def validate_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Files or folders (default: the built-in databases and any --hardware-db/--model-db)."),
    ] = None,
) -> None:
    """Validate hardware and model databases; exit 1 on any problem, one `file:line: field: problem` per line."""
    from gemma_fit.jobs.validate import validate

    missing = [p for p in paths or () if not p.exists()]
    if missing:  # nothing to validate is bad input (exit 2), not a database problem (exit 1)
        raise BadInput(f"db validate: no such file or folder: {missing[0]}")
    roots = list(paths or [packaged_dir("hardware_db"), packaged_dir("model_db"),
                           *hardware_dirs(), *model_dirs()])
    report = validate(roots)
    for problem in report.problems:
        print(problem)
    if report.problems:
        print(f"gemma-fit: db validate: {len(report.problems)} problem(s) in {report.summary()}", file=sys.stderr)
        # SystemExit, not typer.Exit: `app(standalone_mode=False)` returns a typer.Exit's code instead of raising
        raise SystemExit(EXIT_PROBLEMS)
    print(f"db validate: ok, {report.summary()}")


# --- list gpus --------------------------------------------------------------------------------

_VENDOR_ORDER = {"nvidia": 0, "amd": 1, "intel": 2, "apple": 3}


def list_gpus(as_json: JsonOpt = False) -> None:
    """Every GPU in the hardware database, with memory, bandwidth and compute."""
    from gemma_fit.hardware.catalog import load_gpu_entries

    entries = sorted(load_gpu_entries(hardware_dirs()).values(),
                     key=lambda e: (_VENDOR_ORDER.get(e.vendor, 9), e.memory_bytes, e.id))
    if as_json:
        print(json.dumps([e.model_dump(mode="json") for e in entries], indent=2))
        return
    width = max((len(e.id) for e in entries), default=2)
    from rich.table import Column, Table

    table = Table(Column("id", no_wrap=True, min_width=width), Column("name", overflow="fold"),
                  *(Column(h, justify="right", no_wrap=True) for h in ("GiB", "usable", "GB/s", "TFLOPS")),
                  Column("backend", no_wrap=True),
                  title="memory and usable memory in GiB, bandwidth in GB/s, FP16 tensor TFLOPS", title_justify="left")
    for e in entries:
        table.add_row(e.id, e.name, f"{e.memory_bytes / GIB:g}", f"{e.usable_memory_bytes / GIB:.1f}",
                      _num(e.memory_bandwidth_gbps), _num(e.fp16_tensor_tflops), e.backend)
    _out().print(table)
