"""`gemma-fit list models|quants|cpus`: what the databases hold (`list gpus` is in cli.hardware)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from gemma_fit.cli import state

if TYPE_CHECKING:
    from rich.console import Console


def console() -> Console:
    from gemma_fit.present.terminal import console as terminal

    return terminal()


def list_models(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every model in the database."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.model.catalog import entry_spec, load_model_db
    from gemma_fit.model.spec import GENERATION_ORDER

    entries = sorted(load_model_db(state.model_dirs()).values(),
                     key=lambda e: (GENERATION_ORDER[e.generation], entry_spec(e).n_embd))
    rows = []
    for e in entries:
        spec = entry_spec(e)
        rows.append({"id": e.id, "name": e.name, "arch": e.arch, "n_layers": spec.n_layer,
                     "n_ctx_train": spec.n_ctx_train, "license": e.license,
                     "n_params": build_plan(spec, "BF16").n_params})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Column, Table

    width = max(len(str(r["id"])) for r in rows)
    table = Table(Column("id", no_wrap=True, min_width=width), Column("name", overflow="fold"), "arch", "layers",
                  "context", "params (text)", Column("licence", overflow="fold"))
    for r in rows:
        table.add_row(str(r["id"]), str(r["name"]), str(r["arch"]), str(r["n_layers"]),
                      f"{r['n_ctx_train']:,}", f"{float(str(r['n_params'])) / 1e9:.2f} B", str(r["license"]))
    console().print(table)


def list_quants(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The llama.cpp file types gemma-fit knows, with their base tensor type."""
    from gemma_fit.gguf.types import CONTRACT_QUANTS, file_type, recipes, unsloth_ud

    rows = []
    # llama-quantize's file types, then published mixes, then Unsloth's (modelled as their base type's mix)
    for name in (*CONTRACT_QUANTS, *recipes(), *unsloth_ud()):
        ft = file_type(name)
        bits = ft.default_type.bytes * 8 / ft.default_type.block
        rows.append({"quant": name, "ftype_id": ft.id, "base_type": ft.default_type.name,
                     "base_bits_per_weight": round(bits, 4), "mix_of": ft.mix_of})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("quant", "llama_ftype", "base tensor type", "bits/weight (base)")
    for r in rows:
        table.add_row(str(r["quant"]), str(r["ftype_id"]), str(r["base_type"]), f"{r['base_bits_per_weight']:.4g}")
    console().print(table)




def list_cpus(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every CPU in the hardware database (what --cpu accepts)."""
    from gemma_fit.hardware.catalog import cpu_spec, load_hardware_db

    db = load_hardware_db(state.hardware_dirs())
    rows = []
    for cid, e in sorted(db.cpus.items()):
        spec = cpu_spec(e, state.hardware_dirs())
        rows.append({"id": cid, "name": e.name, "family": e.family, "isa": e.isa, "cores": e.cores,
                     "threads": e.threads, "performance_cores": e.performance_cores, "memory": spec.memory,
                     "ram_bandwidth_gbps": spec.ram_bandwidth_gbps, "source": e.source})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Column, Table

    table = Table(Column("id", no_wrap=True), Column("name", overflow="fold"), "isa", "cores", "threads",
                  Column("memory (supported maximum)", overflow="fold"), "GB/s")
    for r in rows:
        table.add_row(str(r["id"]), str(r["name"]), str(r["isa"]), str(r["cores"]), str(r["threads"]),
                      str(r["memory"]), f"{r['ram_bandwidth_gbps']:g}")
    console().print(table)
