"""`gemma-fit db validate [PATH...]`: schema and physical-consistency checks of the databases (common.py: the
report and its problems; hardware.py, model.py and quality.py: the checks of each kind of file).

Each problem prints as `file:line: field: what is wrong`. Hardware files (hardware_db/), model
entries (model_db/*.yaml) and machine files (`--hardware`) are told apart by their shape.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from gemma_fit.base.errors import GemmaFitError
from gemma_fit.db.files import packaged_dir, read_text
from gemma_fit.db.yaml_files import parse_yaml
from gemma_fit.hardware.catalog import FILE_KINDS
from gemma_fit.jobs.validate.common import Doc, Problem, Report, Seen
from gemma_fit.jobs.validate.hardware import check_list_file, check_machine
from gemma_fit.jobs.validate.model import check_model
from gemma_fit.jobs.validate.quality import check_engines_file, check_quality

__all__ = ["Problem", "Report", "validate", "validate_paths"]


def _yaml_files(paths: list[Path], report: Report) -> Iterator[Path]:
    for path in paths:
        try:
            if path.is_dir():
                yield from sorted(p for p in _walk(path) if p.suffix in (".yaml", ".yml"))
            elif path.is_file():
                yield path
            else:
                report.problems.append(Problem(path, None, "(path)", "not found"))
        except (OSError, RuntimeError) as exc:  # a folder that changes as it is read (/proc), a link loop
            report.problems.append(Problem(path, None, "(path)", f"cannot read: {exc}"))


def _walk(folder: Path) -> list[Path]:
    """The regular files under `folder`, links not followed (a loop or a device is no database file)."""
    out = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            p = Path(root, name)
            try:
                if stat.S_ISREG(p.lstat().st_mode):
                    out.append(p)
            except OSError:  # gone between the listing and the look
                continue
    return out


def _read(path: Path, report: Report) -> Doc | None:
    """The file's data and node tree, read as every YAML file is (at most MAX_YAML_BYTES, UTF-8, aliases counted,
    values that cannot be read refused): its problem otherwise."""
    try:
        data, root = parse_yaml(read_text(path), path)
    except GemmaFitError as exc:
        where, _, what = str(exc).partition(": ")
        line = where.rsplit(":", 1)[-1]
        report.problems.append(Problem(path, int(line) if line.isdigit() else None,
                                       "(yaml)" if what.startswith("malformed YAML") else "(file)", what or str(exc)))
        return None
    return Doc(path, data, root)


def _kind(doc: Doc) -> str | None:
    data = doc.data
    if "llamacpp" in doc.path.parts:
        return "llamacpp"
    if doc.path.parent.name == "quality":
        return "quality"
    if doc.path.parent.name == "engines" and doc.path.parent.parent.name in ("model_db", "_data"):
        return "engines"
    if not isinstance(data, dict):
        return None
    if "name" in data and any(k in data for k in ("gpus", "ram_gb", "disk", "ram_type")):
        return "machine"
    hardware = [k for k in FILE_KINDS if k in data]
    if len(hardware) == 1:
        return hardware[0]
    if "config" in data or "generation" in data or doc.path.parent.name == "model_db":
        return "model"
    return None


def _cross_checks(report: Report, seen: Seen) -> None:
    gpu_ids = {i for k, i in seen.ids if k == "gpus"}
    for (kind, price_id), (path, line) in seen.ids.items():
        if kind == "prices" and gpu_ids and price_id not in gpu_ids:
            report.problems.append(Problem(path, line, f"{price_id}.id", "a price for no GPU in the database"))
    defaults = [(p, ln) for p, ln, what, _, kind in seen.refs if kind == "default-electricity"]
    if len(defaults) > 1:  # `cost` uses one without --kwh-price: a second is ambiguous
        p, ln = defaults[1]
        report.problems.append(Problem(p, ln, "default", f"a second default electricity price (the first: "
                                                        f"{defaults[0][0]}:{defaults[0][1]}); mark one"))
    for path, line, what, ref, kind in seen.refs:
        if kind == "default-electricity":
            continue
        known = {i for k, i in seen.ids if k == kind}
        if known and ref not in known:
            report.problems.append(Problem(path, line, what, f"{ref} is not an id of the {kind} database"))
    for key, gpu_id, doc, loc in seen.device_names:
        owner = seen.names.get(key)
        if owner is not None and owner[0] != gpu_id:
            sharing = {g for k, g, _, _ in seen.device_names if k == key}
            if owner[0] not in sharing:
                report.add(doc, loc, f"{gpu_id}.device_names",
                           f"this name is an alias of {owner[0]} ({owner[1]}:{owner[2]}), which does not report it")


def validate(paths: list[Path] | None = None) -> Report:
    """Check every YAML file under `paths` (default: the built-in hardware_db and model_db)."""
    report, seen = Report(), Seen()
    roots = list(paths) if paths else [packaged_dir("hardware_db"), packaged_dir("model_db")]
    for path in _yaml_files(roots, report):
        doc = _read(path, report)
        report.files += 1
        if doc is None:
            continue
        kind = _kind(doc)
        if kind in FILE_KINDS:
            check_list_file(doc, report, seen, kind)
        elif kind == "model":
            check_model(doc, report, seen)
        elif kind == "machine":
            check_machine(doc, report)
        elif kind == "quality":
            check_quality(doc, report, seen)
        elif kind == "engines":
            check_engines_file(doc, report)
        elif kind is None:
            report.add(doc, (), "(top level)", "cannot tell what this file is: expected a hardware_db file "
                       "(gpus:, cpus:, interconnects:, memory: or storage:), a model_db entry or a machine file")
    _cross_checks(report, seen)
    report.problems.sort(key=lambda p: (str(p.file), p.line or 0))
    return report


def validate_paths(paths: list[Path] | None = None) -> list[Problem]:
    """Every problem found under `paths` (default: the built-in databases); empty when all is well."""
    return validate(paths).problems
