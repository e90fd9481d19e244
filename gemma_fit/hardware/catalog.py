"""Loading hardware_db/ and resolving what users type after --gpu, and the machine file.

GPU names resolve case-insensitively by id, alias or the name a driver reports: `RTX A4000`,
`NVIDIA RTX A4000`, `rtx-a4000` and `a4000` are one GPU. Names are compared by `name_key`, which
drops vendor words (NVIDIA, GeForce, Tesla, AMD, Radeon, Instinct, Intel, Apple) and splits letters
from digits, so `RTX4090`, `rtx-4090` and `GeForce RTX 4090` are the same key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import field, fields, replace
from functools import cache
from itertools import combinations
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gemma_fit.base.errors import BadInput, DatabaseError
from gemma_fit.base.record import record
from gemma_fit.base.text import has_unsafe, printable
from gemma_fit.db.files import packaged_dir, yaml_files_under
from gemma_fit.db.yaml_files import read_yaml
from gemma_fit.db.yaml_lines import compose, format_validation
from gemma_fit.hardware.power import PowerMode, PowerModes, fit_matrix_exponent
from gemma_fit.hardware.power_schema import PowerModesEntry, PowerModesFile
from gemma_fit.hardware.price_schema import (
    ApiEntry,
    ApiFile,
    ElectricityEntry,
    ElectricityFile,
    PriceEntry,
    PriceFile,
    RentEntry,
    RentFile,
)
from gemma_fit.hardware.schema import (
    CPUEntry,
    CPUFile,
    GPUEntry,
    GPUFile,
    InterconnectEntry,
    InterconnectFile,
    MemoryEntry,
    MemoryFile,
    StorageEntry,
    StorageFile,
)
from gemma_fit.hardware.spec import (  # noqa: F401 - re-exported
    CPUSpec,
    GPUAttachment,
    GPUSpec,
    StorageSpec,
    as_seen_by_software,
    cpu_key,
    ids_named_by_prefix,
    name_key,
)

# top-level key of a hardware_db file -> the schema of the whole file
FILE_KINDS: dict[str, type[BaseModel]] = {
    "gpus": GPUFile,
    "cpus": CPUFile,
    "interconnects": InterconnectFile,
    "memory": MemoryFile,
    "storage": StorageFile,
    "prices": PriceFile,
    "rent": RentFile,
    "api": ApiFile,
    "electricity": ElectricityFile,
    "power_modes": PowerModesFile,
}


# GPUSpec fields worked out from the entry rather than copied from a field of the same name, or set by a flag
# (--vulkan-driver) rather than by the database.
_DERIVED_SPEC_FIELDS = frozenset({"nvlink_sxm", "vulkan_driver"})
# The rest are copied as they are: a field declared in both GPUEntry and GPUSpec needs no code here.
_COPIED_SPEC_FIELDS = tuple(f.name for f in fields(GPUSpec) if f.name not in _DERIVED_SPEC_FIELDS)


def spec_from_entry(entry: GPUEntry) -> GPUSpec:
    copied = {name: getattr(entry, name) for name in _COPIED_SPEC_FIELDS}
    return GPUSpec(**copied, nvlink_sxm="SXM" in entry.form_factor and bool(entry.nvlink_gbps))


def storage_spec(entry: StorageEntry) -> StorageSpec:
    return StorageSpec(entry.id, entry.name, entry.sequential_read_gbps, entry.random_read_gbps,
                       entry.link_ceiling_gbps, entry.source)


@record
class HardwareDB:
    """Every hardware entry, keyed by id; entries in later (extra) folders replace earlier ones."""

    gpus: dict[str, GPUEntry] = field(default_factory=dict)
    cpus: dict[str, CPUEntry] = field(default_factory=dict)
    interconnects: dict[str, InterconnectEntry] = field(default_factory=dict)
    memory: dict[str, MemoryEntry] = field(default_factory=dict)
    storage: dict[str, StorageEntry] = field(default_factory=dict)
    prices: dict[str, PriceEntry] = field(default_factory=dict)
    rent: dict[str, RentEntry] = field(default_factory=dict)
    api: dict[str, ApiEntry] = field(default_factory=dict)
    electricity: dict[str, ElectricityEntry] = field(default_factory=dict)
    power_modes: dict[str, PowerModesEntry] = field(default_factory=dict)  # GPU id -> its nvpmodel modes
    files: dict[str, Path] = field(default_factory=dict)  # "kind:id" -> file it came from
    names: dict[str, str] = field(default_factory=dict)  # name_key of id/alias -> GPU id
    device_names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name_key -> GPU ids
    cpu_names: dict[str, str] = field(default_factory=dict)  # cpu_key of id/name/alias/model number -> CPU id


def classify(data: Any) -> str | None:
    """Which hardware_db file kind a parsed YAML document is (`gpus`, `storage`, ...), if any."""
    if isinstance(data, dict) and len(data) == 1:
        (key,) = data
        return key if key in FILE_KINDS else None
    return None


def parse_file(path: Path) -> tuple[str, BaseModel]:
    """Read and validate one hardware_db file; DatabaseError with file:line: field on any problem."""
    data = read_yaml(path)
    kind = classify(data)
    if kind is None:
        raise DatabaseError(f"{path}: expected one top-level key, one of: {', '.join(FILE_KINDS)}")
    model = FILE_KINDS[kind]
    try:
        return kind, model.model_validate(data)
    except ValidationError as exc:
        root = compose(path.read_text(encoding="utf-8"))
        lines = format_validation(path, exc, data, root, models=[model, GPUEntry, CPUEntry, InterconnectEntry,
                                                                 MemoryEntry, StorageEntry])
        more = f" (+{len(lines) - 1} more; run gemma-fit db validate {path})" if len(lines) > 1 else ""
        raise DatabaseError(lines[0] + more) from None


def _add(db: HardwareDB, kind: str, parsed: BaseModel, path: Path) -> None:
    table: dict[str, Any] = getattr(db, kind)
    for entry in getattr(parsed, kind):
        table[entry.id] = entry
        db.files[f"{kind}:{entry.id}"] = path


def _index_names(db: HardwareDB) -> None:
    devices: dict[str, list[str]] = {}
    for entry in db.gpus.values():
        for name in (entry.id, *entry.aliases):
            db.names[name_key(name)] = entry.id
        for name in entry.device_names:
            ids = devices.setdefault(name_key(name), [])
            if entry.id not in ids:
                ids.append(entry.id)
    db.device_names.update({k: tuple(v) for k, v in devices.items()})
    numbers: dict[str, list[str]] = {}
    for cpu in db.cpus.values():
        for name in (cpu.id, cpu.name, *cpu.aliases):
            db.cpu_names[cpu_key(name)] = cpu.id
        numbers.setdefault(cpu_key(cpu.name).rsplit("-", 1)[-1], []).append(cpu.id)
    for number, ids in numbers.items():  # "7950x", "13900k": the model number alone where it is unique
        if len(ids) == 1:
            db.cpu_names.setdefault(number, ids[0])


@cache
def load_hardware_db(extra_dirs: tuple[Path, ...] = ()) -> HardwareDB:
    """The built-in hardware_db plus extra folders (every *.yaml below each, recursively)."""
    db = HardwareDB()
    for folder in (packaged_dir("hardware_db"), *extra_dirs):
        if not folder.is_dir():
            raise BadInput(f"hardware database folder not found: {folder}")
        for path in yaml_files_under(folder):
            kind, parsed = parse_file(path)
            _add(db, kind, parsed, path)
    _index_names(db)
    return db


def load_gpu_entries(extra_dirs: tuple[Path, ...] = ()) -> dict[str, GPUEntry]:
    """The full database entries (every field), keyed by id."""
    return dict(load_hardware_db(extra_dirs).gpus)


def load_gpus(extra_dirs: tuple[Path, ...] = ()) -> dict[str, GPUSpec]:
    """Every GPU as a GPUSpec, keyed by id."""
    return {gid: spec_from_entry(e) for gid, e in load_hardware_db(extra_dirs).gpus.items()}


def _suggestions(db: HardwareDB, key: str) -> list[str]:
    """Ids whose names contain what was typed (`3080`, `a100`), then close spellings."""
    ids: list[str] = []
    for name, gid in db.names.items():
        if f"-{key}-" in f"-{name}-" and gid not in ids:
            ids.append(gid)
    for close in difflib.get_close_matches(key, list(db.names), n=6, cutoff=0.6):
        if db.names[close] not in ids:
            ids.append(db.names[close])
    return ids[:6]


def _starting_with(db: HardwareDB, prefix: str) -> list[str]:
    """The ids whose names start with what was typed, in the database's order."""
    return [gid for gid in db.gpus if name_key(gid).startswith(prefix)]


def _listed(ids: list[str], most: int = 12, last: str = "and") -> str:
    if len(ids) > most:
        return ", ".join(ids[:most]) + f" or {len(ids) - most} more (gemma-fit list gpus)"
    return ", ".join(ids[:-1]) + f" {last} {ids[-1]}" if last != "and" and len(ids) > 1 else ", ".join(ids)


def find_gpu_entry(name: str, extra_dirs: tuple[Path, ...] = ()) -> GPUEntry:
    """The database entry for an id, alias or driver-reported name; BadInput when unknown or ambiguous."""
    raw = name.strip()
    if has_unsafe(raw):  # '\u202ertx-4090' is not rtx-4090: a control, bidi or zero-width mark is never in an id
        raise BadInput(f"GPU '{printable(raw, 80)}' holds a control, bidi or zero-width character (see gemma-fit "
                       "list gpus)")
    key = name_key(raw)
    if not key:
        raise BadInput("GPU name is empty (see gemma-fit list gpus)")
    db = load_hardware_db(extra_dirs)
    if key in db.gpus:
        return db.gpus[key]
    reported = db.device_names.get(key, ())
    if len(reported) == 1:  # the name the driver reports for this one card ("NVIDIA H200" is the SXM part)
        return db.gpus[reported[0]]
    several = ids_named_by_prefix(key, list(db.gpus))
    if len(several) > 1:  # with the other cards of that name (-super, -ti), which the configurations leave out
        several += [i for i in _starting_with(db, key + "-") if i not in several]
        raise BadInput(f"GPU '{raw}' is sold in several configurations: {_listed(several)}; give one of those ids")
    if key in db.names:
        return db.gpus[db.names[key]]
    ids = reported
    if len(ids) == 1:
        return db.gpus[ids[0]]
    if ids:
        raise BadInput(f"ambiguous GPU '{raw}': {', '.join(ids)} report that name; give one of those ids")
    sizes = _sizes_sold(db, raw.lower().replace(" ", "-"))
    if sizes:
        raise BadInput(f"unknown GPU '{raw}': that chip was sold with {sizes} (see gemma-fit list gpus)")
    starting = _starting_with(db, key)
    if len(starting) > 1:  # a family typed as a prefix (rtx-30, rx-7900): every card it names
        raise BadInput(f"GPU '{raw}' starts {len(starting)} ids; did you mean {_listed(starting, last='or')}?")
    hint = _suggestions(db, key)
    more = f"; did you mean {', '.join(hint)}?" if hint else ""
    raise BadInput(f"unknown GPU '{raw}' (see gemma-fit list gpus){more}")


def _sizes_sold(db: HardwareDB, key: str) -> str | None:
    """For a chip named with a memory size the database lacks (m4-max-72gb): the ids of the sizes it has."""
    m = re.fullmatch(r"(.+)-(\d+)gb", key)
    if m is None:
        return None
    ids = sorted((gid for gid in db.gpus if re.fullmatch(rf"{re.escape(m.group(1))}-\d+gb", gid)),
                 key=lambda gid: int(gid.rsplit("-", 1)[1][:-2]))
    return ", ".join(ids) if ids else None


def cpu_spec(entry: CPUEntry, extra_dirs: tuple[Path, ...] = ()) -> CPUSpec:
    known = memory_speed(entry.memory_type, entry.memory_speed_mts, extra_dirs)
    per_channel = known.per_channel_gbps if known else entry.memory_speed_mts * 8 / 1000  # 8 bytes a transfer
    kind = f"{entry.memory_type.upper()}-{entry.memory_speed_mts}"
    memory = (f"{kind}, {round(entry.memory_channels * 64)}-bit bus" if entry.memory_type.startswith("lp")
              else f"{kind} x {entry.memory_channels:g} channels")
    return CPUSpec(entry.name, entry.family, entry.isa, entry.cores, entry.threads, entry.performance_cores,
                   round(per_channel * entry.memory_channels, 2), memory, entry.source, entry.dotprod is not False,
                   entry.id, boost_clock_ghz=entry.boost_clock_ghz)


def find_cpu(name: str, extra_dirs: tuple[Path, ...] = ()) -> CPUSpec | None:
    """The CPU a name means, or None when the database does not know it."""
    db = load_hardware_db(extra_dirs)
    cid = db.cpu_names.get(cpu_key(name))
    return cpu_spec(db.cpus[cid], extra_dirs) if cid else None


def resolve_cpu(name: str, extra_dirs: tuple[Path, ...] = (), otherwise: str = "or give --cores N (and --ram-type)",
                ) -> CPUSpec:
    """The CPU for --cpu NAME (id, name, alias or model number); BadInput naming close ids when unknown."""
    raw = name.strip()
    if has_unsafe(raw):
        raise BadInput(f"--cpu '{printable(raw, 80)}' holds a control, bidi or zero-width character (see gemma-fit "
                       "list cpus)")
    key = cpu_key(raw)
    if not key:
        raise BadInput("--cpu is empty: give a CPU name or id (see gemma-fit list cpus)")
    found = find_cpu(raw, extra_dirs)
    if found is not None:
        return found
    db = load_hardware_db(extra_dirs)
    close = [db.cpu_names[k] for k in difflib.get_close_matches(key, list(db.cpu_names), n=8, cutoff=0.6)]
    hint = list(dict.fromkeys(close))[:5]
    more = f"; did you mean {', '.join(hint)}? {otherwise}" if hint else f"; {otherwise}"
    raise BadInput(f"unknown CPU '{printable(raw, 80)}' (see gemma-fit list cpus){more}")


def resolve_gpu(name: str, extra_dirs: tuple[Path, ...] = ()) -> GPUSpec:
    """The GPUSpec for an id, alias or NVML name, case-insensitive (`RTX A4000` -> a4000)."""
    return spec_from_entry(find_gpu_entry(name, extra_dirs))


def match_device(name: str, total_bytes: int | None, extra_dirs: tuple[Path, ...] = ()) -> str | None:
    """The id of the entry a probed device is, by its reported name and memory size (within 10%)."""
    db = load_hardware_db(extra_dirs)
    key = name_key(name)
    candidates = list(db.device_names.get(key, ()))
    if key in db.names and db.names[key] not in candidates:
        candidates.append(db.names[key])
    if total_bytes is None:
        return candidates[0] if len(candidates) == 1 else None
    best: tuple[float, str] | None = None
    for gid in candidates:
        entry = db.gpus[gid]
        off = abs(entry.usable_memory_bytes - total_bytes) / entry.usable_memory_bytes
        if off <= 0.10 and (best is None or off < best[0]):
            best = (off, gid)
    return best[1] if best else None


def storage_class(storage_id: str, extra_dirs: tuple[Path, ...] = ()) -> StorageSpec:
    db = load_hardware_db(extra_dirs)
    key = storage_id.strip().lower()
    if key not in db.storage:
        from gemma_fit.base.suggest import did_you_mean

        raise BadInput(f"unknown storage class '{storage_id}' (known: {', '.join(sorted(db.storage))})"
                       f"{did_you_mean(storage_id, db.storage)}")
    return storage_spec(db.storage[key])


def pcie_link(generation: int, lanes: int, extra_dirs: tuple[Path, ...] = ()) -> InterconnectEntry | None:
    """The PCIe entry for a generation and width (per-direction GB/s), or None if not in the database."""
    return load_hardware_db(extra_dirs).interconnects.get(f"pcie-{generation}-x{lanes}")


def interconnect(link_id: str, extra_dirs: tuple[Path, ...] = ()) -> InterconnectEntry:
    db = load_hardware_db(extra_dirs)
    if link_id not in db.interconnects:
        raise BadInput(f"unknown interconnect '{link_id}' (known: {', '.join(sorted(db.interconnects))})")
    return db.interconnects[link_id]


def memory_speed(ram_type: str, speed_mts: int, extra_dirs: tuple[Path, ...] = ()) -> MemoryEntry | None:
    return load_hardware_db(extra_dirs).memory.get(f"{ram_type.lower()}-{speed_mts}")


def power_modes_table(entries: dict[str, PowerModesEntry]) -> dict[str, PowerModes]:
    """Every module's modes, with the matrix exponent fitted on all modules' published prefill pairs (one model's
    same test in two modes)."""
    specs = {gid: power_modes_spec(e) for gid, e in entries.items()}
    pairs = []
    for gid, e in entries.items():
        spec = specs[gid]
        prefill = [r for r in e.measured if r.test.startswith("pp")]
        for a, b in combinations(prefill, 2):
            ma, mb = spec.find(a.mode), spec.find(b.mode)
            sa, sb = (spec.compute_share(ma) if ma else None), (spec.compute_share(mb) if mb else None)
            if a.model == b.model and a.test == b.test and sa and sb and ma != mb:
                pairs.append((sa / sb, a.tokens_per_s / b.tokens_per_s))
    exponent = fit_matrix_exponent(pairs)
    return {gid: replace(s, matrix_exponent=exponent) for gid, s in specs.items()}


def power_modes_spec(e: PowerModesEntry) -> PowerModes:
    assert e.rated.gpu_mhz is not None and e.rated.emc_mhz is not None and e.rated.tpcs is not None  # the schema's
    return PowerModes(e.id, e.source, e.default_mode, e.rated.gpu_mhz, e.rated.emc_mhz, e.rated.tpcs,
                      e.uncapped.gpu_mhz, e.uncapped.emc_mhz,
                      tuple(PowerMode(m.name, m.nvpmodel_id, m.cpu_cores, m.gpu_max_mhz, m.gpu_tpcs, m.emc_max_mhz)
                            for m in e.modes))
