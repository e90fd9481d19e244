"""This machine's speed calibration: what `gemma-fit bench --save` and `smoke --record` measured here, kept in the
user's settings folder (base.cache.calibration_file) and applied to later answers for the same machine.

A machine is the hardware an answer is for: its GPUs with their backend and its CPU (machine_key). Each saved run
keeps llama.cpp's figures beside the speed model's uncalibrated prediction of the same test; the factors are the
median measured / predicted per metric over the latest runs, so one odd run does not set them. The file is read
with bounds (size, runs) and anything unreadable in it is ignored with a note, never an error: a calibration only
ever refines an answer.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from gemma_fit.base.cache import calibration_file
from gemma_fit.hardware.spec import Hardware, SpeedCalibration, cpu_key

SCHEMA = "gemma-fit.calibration/1"
MAX_FILE_BYTES = 4 * 1024 * 1024
RUNS_KEPT = 20  # per machine: the latest, so a changed driver or build is soon outvoted
FACTOR_RANGE = (0.02, 50.0)  # measured / predicted outside this is a broken run, not a calibration
KINDS = ("decode", "prefill", "batched")


def machine_key(hw: Hardware) -> str:
    """The identity of the hardware an answer is for: its GPUs with their backend (`--gpu local` and `--gpu ID` of
    the same card are one machine), else its CPU."""
    if hw.gpus:
        return "+".join(f"{g.id}@{g.backend}" for g in hw.gpus)
    cpu = hw.cpu.name if hw.cpu is not None else hw.cpu_name
    return f"cpu:{cpu_key(cpu) if cpu else 'unknown'}"


def read_store(path: Path | None = None) -> dict[str, Any]:
    """The calibration file's document; an empty one when it is absent, too large or not ours."""
    return _parsed(path or calibration_file()) or {"schema": SCHEMA, "machines": {}}


def _strict(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def _parsed(path: Path) -> dict[str, Any] | None:
    """The file's document when it is a calibration this size allows; None otherwise."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_strict)  # NaN is no calibration
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: [[[[... thousands deep
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("machines"), dict):
        return None
    return doc


def _writable(path: Path) -> None:
    """Refuse to save over what is not this file: a folder, a device or pipe, or a file that is not a calibration
    (an unreadable one is the user's to move away, not ours to replace)."""
    from gemma_fit.base.errors import BadInput
    from gemma_fit.base.text import printable

    shown = printable(str(path), 120)
    try:
        exists = path.exists() or path.is_symlink()
        regular = path.is_file()
    except OSError as exc:
        raise BadInput(f"cannot save the calibration to {shown}: {exc.strerror or exc}") from None
    if exists and not regular:
        raise BadInput(f"cannot save the calibration to {shown}: not a regular file")
    if regular and path.stat().st_size > 0 and _parsed(path) is None:
        raise BadInput(f"{shown} is not a gemma-fit calibration file (or is damaged): move it away to save")


def save_run(hw: Hardware, run: dict[str, Any], path: Path | None = None) -> Path:
    """Add one run (its date, what ran, and rows of kind / predicted / measured) to this machine's entry; the file.
    Written to a temporary file and renamed: an interrupted save leaves the old file whole."""
    from gemma_fit.base.errors import BadInput
    from gemma_fit.base.files import write_text

    path = path or calibration_file()
    _writable(path)
    doc = read_store(path)
    key = machine_key(hw)
    entry = doc["machines"].get(key)
    if not isinstance(entry, dict):
        entry = doc["machines"][key] = {"label": hw.label, "runs": []}
    entry["label"] = hw.label
    entry["runs"] = [*_runs(entry), run][-RUNS_KEPT:]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot save the calibration in {path.parent}: {exc.strerror or exc}") from None
    write_text(path, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")  # atomic, BadInput
    return path


def _runs(entry: Any) -> list[dict[str, Any]]:
    runs = entry.get("runs") if isinstance(entry, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def _ratios(runs: list[dict[str, Any]], kind: str) -> list[tuple[int, float]]:
    """(sequences, measured / predicted) of every usable row of this kind; a batched row of one sequence is a
    single-stream decode."""
    out = []
    for run in runs:
        rows = run.get("rows") if isinstance(run, dict) else None
        for row in rows if isinstance(rows, list) else []:
            try:
                seqs = int(row.get("concurrency", 1))
                row_kind = "decode" if row.get("kind") == "batched" and seqs == 1 else row.get("kind")
                if row_kind != kind:
                    continue
                ratio = float(row["measured"]) / float(row["predicted"])
            except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
                continue
            if FACTOR_RANGE[0] <= ratio <= FACTOR_RANGE[1] and 1 <= seqs <= 1 << 16:
                out.append((seqs, ratio))
    return out


def _median(values: list[float]) -> float | None:
    import statistics  # only where this machine has saved runs: a cold check without them never loads it

    return round(statistics.median(values), 4) if values else None


def calibration_from(entry: dict[str, Any]) -> SpeedCalibration | None:
    """The factors of one machine's saved runs (None when no run has a usable row)."""
    runs = _runs(entry)
    found = {kind: _ratios(runs, kind) for kind in KINDS}
    if not any(found.values()):
        return None
    dates = sorted(str(r.get("date", ""))[:10] for r in runs if r.get("date"))
    what = sorted({f"{r.get('model')} {r.get('quant')}" for r in runs if r.get("model")})
    n = sum(len(v) for v in found.values())
    label = (f"calibrated here on {dates[-1] if dates else 'an unknown date'} (gemma-fit bench: "
             f"{', '.join(what[:3]) or 'unnamed runs'}; {n} measured test{'s' if n != 1 else ''})")
    by_seqs: dict[int, list[float]] = {}
    for seqs, ratio in found["batched"]:
        by_seqs.setdefault(seqs, []).append(ratio)
    batched = tuple((seqs, _median(v) or 0.0) for seqs, v in sorted(by_seqs.items()))
    return SpeedCalibration(label, _median([r for _, r in found["decode"]]), _median([r for _, r in found["prefill"]]),
                            batched)


def with_local_calibration(hw: Hardware, path: Path | None = None) -> Hardware:
    """The hardware with this machine's saved calibration attached, where one was saved for exactly it."""
    entry = read_store(path)["machines"].get(machine_key(hw))
    cal = calibration_from(entry) if entry is not None else None
    return replace(hw, speed_calibration=cal) if cal is not None else hw
