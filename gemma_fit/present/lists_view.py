"""`gemma-fit probe` and `gemma-fit list ...` in the terminal: tables that fit the terminal's width, ids never cut."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.units import GIB, fmt_bytes
from gemma_fit.present.columns import Col, fitted_table
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
    if not entries:
        out.print("no GPU in the database matches these filters (gemma-fit list gpus --help)")
        return
    cols = (Col("id"), Col("GiB", right=True), Col("GB/s", 1, right=True), Col("TFLOPS", 2, right=True),
            Col("usable", 3, right=True), Col("backend", 4), Col("name", 5, fold=True, min_fold=24))
    rows = [[_text(e["id"]), f"{e['memory_bytes'] / GIB:g}", _num(e.get("memory_bandwidth_gbps")),
             _num(e.get("fp16_tensor_tflops")), f"{e['usable_memory_bytes'] / GIB:.1f}", _text(e["backend"]),
             _text(e["name"])] for e in entries]
    out.print(fitted_table(cols, rows, out.width, title="memory and usable memory in GiB, bandwidth in GB/s, FP16 "
                           "tensor TFLOPS"))
    if not filtered:
        out.print(f"{len(entries)} GPUs; narrow with --vendor, --min-memory, --backend or --search")


def render_models(out: Console, rows: list[dict[str, Any]]) -> None:
    cols = (Col("id"), Col("context", 1, right=True), Col("params (text)", 2, right=True), Col("layers", 3, right=True),
            Col("arch", 4), Col("name", 5, fold=True), Col("licence", 6, fold=True))
    cells = [[_text(r["id"]), f"{r['n_ctx_train']:,}", f"{float(str(r['n_params'])) / 1e9:.2f} B", str(r["n_layers"]),
              _text(r["arch"]), _text(r["name"]), _text(r["license"])] for r in rows]
    out.print(fitted_table(cols, cells, out.width))


def render_quants(out: Console, rows: list[dict[str, Any]]) -> None:
    cols = (Col("quant"), Col("base tensor type"), Col("bits/weight (base)", 1, right=True),
            Col("llama_ftype", 2, right=True))
    cells = [[_text(r["quant"]), _text(r["base_type"]), f"{r['base_bits_per_weight']:.4g}", str(r["ftype_id"])]
             for r in rows]
    out.print(fitted_table(cols, cells, out.width))
    out.print("Any quantized type above with Unsloth's UD- prefix (their Gemma 4 files: UD-Q4_K_M, UD-Q5_K_M ...) is "
              "planned as that type, keeping free what their published UD files weigh more.", soft_wrap=False)


def render_cpus(out: Console, rows: list[dict[str, Any]]) -> None:
    cols = (Col("id"), Col("cores", right=True), Col("GB/s", 1, right=True), Col("isa", 2),
            Col("threads", 3, right=True), Col("name", 4, fold=True), Col("memory (supported maximum)", 5, fold=True))
    # an Arm core without the dot-product instructions runs llama.cpp's slower quantized kernels (Armv8.0)
    cells = [[_text(r["id"]), str(r["cores"]), f"{r['ram_bandwidth_gbps']:g}",
              _text(r["isa"] if r.get("dotprod", True) else f"{r['isa']} v8.0"), str(r["threads"]),
              _text(r["name"]), _text(r["memory"])] for r in rows]
    out.print(fitted_table(cols, cells, out.width))
