"""The built-in databases, validated once and kept as a snapshot of plain frozen data.

A cold `check` needs a model's spec, a GPU's spec, a few PCIe rates and the llama.cpp rule tables.
Reading and validating the YAML (and building the pydantic schema that validates it) cost more than
the whole estimate, so the first run stores what it derived in the cache folder
(`$GEMMA_FIT_CACHE` or ~/.cache/gemma-fit) and later runs load that pickle instead. The snapshot is
keyed by the size and modification time of every database file and every module of this package,
so any edit to either rebuilds it; a cache that cannot be read or written is simply not used. The
validated databases stay the one source: this module only keeps what they give.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gemma_fit import __version__
from gemma_fit.base.cache import cache_root
from gemma_fit.db.files import packaged_dir
from gemma_fit.hardware.spec import GPUSpec, StorageSpec, name_key
from gemma_fit.model.spec import ModelSpec

_FORMAT = 1  # bump when the snapshot's shape changes


@dataclass(frozen=True)
class ModelCard:
    """What resolving a name and estimating need of one model_db entry."""

    id: str
    name: str
    generation: str
    size_label: str
    spec: ModelSpec


@dataclass(frozen=True)
class PcieRate:
    per_direction_gbps: float  # theoretical, after encoding
    measured_gbps: float | None  # what copies reached in a cited measurement


@dataclass(frozen=True)
class Catalog:
    models: dict[str, ModelCard]  # lower-case id -> card
    gpus: dict[str, GPUSpec]  # id -> spec
    gpu_names: dict[str, str]  # name_key of an id or alias -> id
    gpu_device_names: dict[str, tuple[str, ...]]  # name_key of a driver-reported name -> ids
    storage: dict[str, StorageSpec]
    pcie: dict[str, PcieRate]  # "pcie-4-x16" -> rates
    rule_tables: dict[str, Any]  # model_db/llamacpp/*.yaml by relative path, as parsed

    def gpu(self, name: str) -> GPUSpec | None:
        """The GPU an id, alias or unambiguous driver name means; None when unknown or ambiguous
        (hardware_db then answers, with its suggestions)."""
        key = name_key(name.strip())
        if key in self.gpu_names:
            return self.gpus[self.gpu_names[key]]
        ids = self.gpu_device_names.get(key, ())
        return self.gpus[ids[0]] if len(ids) == 1 else None


def _sources() -> list[Path]:
    here = Path(__file__).resolve().parent.parent  # the gemma_fit package
    files = [p for name in ("model_db", "hardware_db") for p in sorted(packaged_dir(name).rglob("*.yaml"))]
    return files + sorted(here.rglob("*.py"))


def _key() -> str:
    digest = hashlib.sha256(f"{_FORMAT} {__version__} {sys.version}".encode())
    for path in _sources():
        st = path.stat()
        digest.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _build() -> Catalog:
    """From the validated databases (pydantic, YAML): the slow path, taken once per change."""
    from gemma_fit.db.files import read_yaml
    from gemma_fit.hardware.catalog import load_hardware_db, spec_from_entry, storage_spec
    from gemma_fit.model.catalog import entry_spec, load_model_db

    models = {key: ModelCard(e.id, e.name, e.generation, e.size_label, entry_spec(e))
              for key, e in load_model_db().items()}
    hw = load_hardware_db()
    rules = packaged_dir("model_db") / "llamacpp"
    return Catalog(
        models=models,
        gpus={gid: spec_from_entry(e) for gid, e in hw.gpus.items()},
        gpu_names=dict(hw.names),
        gpu_device_names=dict(hw.device_names),
        storage={sid: storage_spec(e) for sid, e in hw.storage.items()},
        pcie={lid: PcieRate(e.per_direction_gbps, e.measured_gbps) for lid, e in hw.interconnects.items()
              if e.kind == "pcie"},
        rule_tables={f"llamacpp/{p.name}": read_yaml(p) for p in sorted(rules.glob("*.yaml"))},
    )


def _cache_file() -> Path:
    return cache_root() / "catalog.pickle"


def _load(path: Path, key: str) -> Catalog | None:
    try:
        with path.open("rb") as f:
            stored_key, snapshot = pickle.load(f)  # noqa: S301 - our own file in the user's cache folder
    except Exception:  # absent, unreadable, truncated, from another version: rebuild
        return None
    return snapshot if stored_key == key and isinstance(snapshot, Catalog) else None


def _store(path: Path, key: str, snapshot: Catalog) -> None:
    with contextlib.suppress(OSError):  # a read-only home: every run validates, nothing breaks
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".catalog.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump((key, snapshot), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


_building = False  # while the snapshot is built, rule tables are read from their files


@cache
def catalog() -> Catalog:
    """The snapshot of the built-in databases (from the cache when it matches, else built and stored)."""
    global _building
    key = _key()
    path = _cache_file()
    snapshot = _load(path, key)
    if snapshot is None:
        _building = True
        try:
            snapshot = _build()
        finally:
            _building = False
        _store(path, key, snapshot)
    return snapshot


def rule_table(relative: str) -> Any:
    """A llama.cpp rule table (model_db/llamacpp/*.yaml) as parsed."""
    if not _building:
        table = catalog().rule_tables.get(relative)
        if table is not None:
            return table
    from gemma_fit.db.files import read_yaml

    return read_yaml(packaged_dir("model_db") / relative)
