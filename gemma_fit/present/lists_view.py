"""`gemma-fit probe` and `gemma-fit list ...` in the terminal: tables that fit the terminal's width, ids never cut."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.units import GIB, fmt_bytes
from gemma_fit.present.terminal import shown as _text

if TYPE_CHECKING:
    from rich.console import Console


def _num(value: float | None, fmt: str = "{:g}") -> str:
    return "-" if value is None else fmt.format(value)


def render_probe(out: Console, doc: dict[str, Any]) -> None:
    _print_gpus(out, doc)
    out.print(f"RAM: {fmt_bytes(doc['ram_total_bytes'])} total, {fmt_bytes(doc['ram_available_bytes'])} available")
    freq = f", {doc['cpu_freq_mhz']:.0f} MHz" if doc.get("cpu_freq_mhz") else ""
    out.print(f"CPU: {doc['cpu_count']} logical cores ({doc.get('cpu_physical_cores') or '?'} physical){freq}")
    _print_disks(out, doc["disks"])
    for note in doc["notes"]:
        out.print(f"note: {_text(note)}")


def _print_gpus(out: Console, doc: dict[str, Any]) -> None:
    if not doc["gpus"]:
        out.print("GPUs: none found")
        return
    cuda = f", CUDA {doc['cuda_driver_version']}" if doc.get("cuda_driver_version") else ""
    out.print(f"NVIDIA driver {_text(doc.get('driver_version') or '?')}{_text(cuda)}")
    from rich.table import Column, Table

    table = Table("#", Column("name", overflow="fold"), Column("database id", no_wrap=True), "total", "free",
                  "PCIe", "processes")
    for g in doc["gpus"]:
        pcie = f"Gen{g['pcie_gen']} x{g['pcie_width']}" if g.get("pcie_gen") and g.get("pcie_width") else "-"
        total = fmt_bytes(g["total_bytes"]) if g.get("total_bytes") is not None else "-"
        free = fmt_bytes(g["free_bytes"]) if g.get("free_bytes") is not None else "-"
        table.add_row(str(g["index"]), _text(g["name"]), _text(g.get("matched_id") or "(not in database)"), total,
                      free, pcie, str(len(g.get("processes", []))))
    out.print(table)


def _print_disks(out: Console, disks: list[dict[str, Any]]) -> None:
    if not disks:
        return
    from rich.table import Column, Table

    table = Table(Column("disk", overflow="fold"), Column("mount point", overflow="fold"), "kind", "size", "free")
    for d in disks:
        table.add_row(_text(d["device"]), _text(d["mountpoint"]), _text(d.get("kind") or "?"),
                      fmt_bytes(d["total_bytes"]), fmt_bytes(d["free_bytes"]))
    out.print(table)


def render_gpus(out: Console, entries: list[dict[str, Any]], filtered: bool) -> None:
    """Every GPU entry: the id whole (people copy it), the name folded; the figures right-aligned."""
    from rich.table import Column, Table

    if not entries:
        out.print("no GPU in the database matches these filters (gemma-fit list gpus --help)")
        return
    width = max(len(e["id"]) for e in entries)
    table = Table(Column("id", no_wrap=True, min_width=width), Column("name", overflow="fold", ratio=1),
                  *(Column(h, justify="right", no_wrap=True) for h in ("GiB", "usable", "GB/s", "TFLOPS")),
                  Column("backend", no_wrap=True),
                  title="memory and usable memory in GiB, bandwidth in GB/s, FP16 tensor TFLOPS", title_justify="left")
    for e in entries:
        table.add_row(_text(e["id"]), _text(e["name"]), f"{e['memory_bytes'] / GIB:g}",
                      f"{e['usable_memory_bytes'] / GIB:.1f}", _num(e.get("memory_bandwidth_gbps")),
                      _num(e.get("fp16_tensor_tflops")), _text(e["backend"]))
    out.print(table)
    if not filtered:
        out.print(f"{len(entries)} GPUs; narrow with --vendor, --min-memory, --backend or --search")


def render_models(out: Console, rows: list[dict[str, Any]]) -> None:
    from rich.table import Column, Table

    width = max((len(str(r["id"])) for r in rows), default=2)
    table = Table(Column("id", no_wrap=True, min_width=width), Column("name", overflow="fold", ratio=1), "arch",
                  "layers", "context", "params (text)", Column("licence", overflow="fold"))
    for r in rows:
        table.add_row(_text(r["id"]), _text(r["name"]), _text(r["arch"]), str(r["n_layers"]), f"{r['n_ctx_train']:,}",
                      f"{float(str(r['n_params'])) / 1e9:.2f} B", _text(r["license"]))
    out.print(table)


def render_quants(out: Console, rows: list[dict[str, Any]]) -> None:
    from rich.table import Column, Table

    table = Table(Column("quant", no_wrap=True), "llama_ftype", "base tensor type", "bits/weight (base)")
    for r in rows:
        table.add_row(_text(r["quant"]), str(r["ftype_id"]), _text(r["base_type"]), f"{r['base_bits_per_weight']:.4g}")
    out.print(table)


def render_cpus(out: Console, rows: list[dict[str, Any]]) -> None:
    from rich.table import Column, Table

    table = Table(Column("id", no_wrap=True), Column("name", overflow="fold"), "isa", "cores", "threads",
                  Column("memory (supported maximum)", overflow="fold"), "GB/s")
    for r in rows:
        table.add_row(_text(r["id"]), _text(r["name"]), _text(r["isa"]), str(r["cores"]), str(r["threads"]),
                      _text(r["memory"]), f"{r['ram_bandwidth_gbps']:g}")
    out.print(table)
