"""`gemma-fit list models|gpus|quants|cpus`: what the databases hold, as rows (present.lists_view draws them).

`gpus` and `models` take filters, so that a list a person reads stays short: a vendor, a least memory, a
backend, a generation, a search text.
"""

from __future__ import annotations

from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_range
from gemma_fit.base.record import record
from gemma_fit.base.units import GIB
from gemma_fit.db.catalog import BUILTIN, Catalog

VENDORS = ("nvidia", "amd", "intel", "apple")
GPU_BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl")  # the backends GPU entries run by default
_VENDOR_ORDER = {v: i for i, v in enumerate(VENDORS)}


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` in lower case where it is one of `allowed`; else BadInput with the closest and the list."""
    from gemma_fit.base.suggest import did_you_mean
    from gemma_fit.base.text import printable

    key = value.strip().lower()
    if key not in allowed:
        raise BadInput(f"{option} {printable(value, 40)}: not one of {', '.join(allowed)}"
                       f"{did_you_mean(key, allowed)}")
    return key


@record
class GpuFilter:
    vendor: str | None = None  # nvidia, amd, intel, apple
    min_memory_gib: float | None = None
    backend: str | None = None  # cuda, rocm, vulkan, metal, sycl
    search: str | None = None  # a part of the id or name, any case
    unified: bool | None = None  # only unified-memory machines (True) or only discrete cards (False)


def models(catalog: Catalog = BUILTIN, generation: str | None = None) -> list[dict[str, Any]]:
    """Every model in the database (or of one generation: 1, 2, 3, 3n, 4), oldest generation first."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.model.catalog import entry_spec, load_model_db
    from gemma_fit.model.spec import GENERATION_ORDER

    entries = sorted(load_model_db(catalog.model_dirs).values(),
                     key=lambda e: (GENERATION_ORDER[e.generation], entry_spec(e).n_embd))
    if generation is not None:
        wanted = generation.strip().lower().removeprefix("gemma").strip("- ")
        wanted = _choice("--generation", wanted, tuple(GENERATION_ORDER))
        entries = [e for e in entries if e.generation == wanted]
    rows = []
    for e in entries:
        spec = entry_spec(e)
        rows.append({"id": e.id, "name": e.name, "arch": e.arch, "n_layers": spec.n_layer,
                     "n_ctx_train": spec.n_ctx_train, "license": e.license,
                     "n_params": build_plan(spec, "BF16").n_params})
    return rows


def gpus(catalog: Catalog = BUILTIN, which: GpuFilter | None = None) -> list[Any]:
    """Every GPU entry (the database's full entries) the filter keeps, by vendor, then memory."""
    from gemma_fit.hardware.catalog import load_gpu_entries

    f = which or GpuFilter()
    if f.vendor is not None:
        _choice("--vendor", f.vendor, VENDORS)
    if f.backend is not None:
        _choice("--backend", f.backend, GPU_BACKENDS)
    if f.min_memory_gib is not None:
        check_range("--min-memory", f.min_memory_gib)
    entries = sorted(load_gpu_entries(catalog.hardware_dirs).values(),
                     key=lambda e: (_VENDOR_ORDER.get(e.vendor, 9), e.memory_bytes, e.id))
    return [e for e in entries if _keeps(f, e)]


def _keeps(f: GpuFilter, e: Any) -> bool:
    if f.vendor is not None and e.vendor != f.vendor.strip().lower():
        return False
    if f.min_memory_gib is not None and e.memory_bytes < f.min_memory_gib * GIB:
        return False
    if f.backend is not None and e.backend != f.backend.strip().lower():
        return False
    if f.unified is not None and bool(e.unified_memory) != f.unified:
        return False
    text = (f.search or "").strip().lower()
    return not text or text in e.id.lower() or text in e.name.lower() or any(text in a.lower() for a in e.aliases)


def quants() -> list[dict[str, Any]]:
    """llama-quantize's file types, then published mixes, then Unsloth's (modelled as their base type's mix)."""
    from gemma_fit.gguf.types import CONTRACT_QUANTS, file_type, recipes, unsloth_ud

    rows = []
    for name in (*CONTRACT_QUANTS, *recipes(), *unsloth_ud()):
        ft = file_type(name)
        bits = ft.default_type.bytes * 8 / ft.default_type.block
        rows.append({"quant": name, "ftype_id": ft.id, "base_type": ft.default_type.name,
                     "base_bits_per_weight": round(bits, 4), "mix_of": ft.mix_of})
    return rows


def cpus(catalog: Catalog = BUILTIN) -> list[dict[str, Any]]:
    """Every CPU in the hardware database (what --cpu accepts)."""
    from gemma_fit.hardware.catalog import cpu_spec, load_hardware_db

    db = load_hardware_db(catalog.hardware_dirs)
    rows = []
    for cid, e in sorted(db.cpus.items()):
        spec = cpu_spec(e, catalog.hardware_dirs)
        rows.append({"id": cid, "name": e.name, "family": e.family, "isa": e.isa, "dotprod": spec.dotprod,
                     "cores": e.cores,
                     "threads": e.threads, "performance_cores": e.performance_cores, "memory": spec.memory,
                     "ram_bandwidth_gbps": spec.ram_bandwidth_gbps, "source": e.source})
    return rows
