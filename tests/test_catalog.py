"""The snapshots of the built-in databases (db.snapshot: model cards, hardware specs, rule tables): the same facts
as the validated databases,
rebuilt when anything changes, and what keeps a cold `check` from importing the schema machinery.

Start-up time itself is a benchmark (benchmarks/bench_startup.py); here only what it rests on is checked:
which modules a `check --json` imports, counted, not timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemma_fit.db.files import packaged_dir
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.db.snapshot import load, source_key, store
from gemma_fit.db.yaml_files import read_yaml
from gemma_fit.hardware.catalog import load_gpus, load_hardware_db, storage_spec
from gemma_fit.hardware.snapshot import HardwareSnapshot, _build, known_hardware
from gemma_fit.model.catalog import entry_spec, load_model_db, model_cards, resolve_model


def test_snapshot_holds_what_the_databases_say() -> None:
    cards = model_cards()
    entries = load_model_db()
    assert set(cards) == set(entries)
    for key, entry in entries.items():
        assert cards[key].spec == entry_spec(entry)
        assert (cards[key].id, cards[key].generation) == (entry.id, entry.generation)
    snap = known_hardware()
    assert snap.gpus == load_gpus()
    assert snap.gpu_names == load_hardware_db().names
    assert snap.storage == {sid: storage_spec(e) for sid, e in load_hardware_db().storage.items()}
    for path in sorted((packaged_dir("model_db") / "llamacpp").glob("*.yaml")):
        assert read_packaged_yaml(f"llamacpp/{path.name}") == read_yaml(path)


@pytest.mark.parametrize("name", ["9b", "gemma-3-27b-it", "google/gemma-4-E4B", "E2B", "26b"])
def test_names_resolve_the_same_with_and_without_the_snapshot(name: str, tmp_path: Path) -> None:
    fast = resolve_model(name)
    slow = resolve_model(name, (tmp_path,))  # an (empty) extra database: the validated path
    assert (fast.spec, fast.entry_id, fast.how) == (slow.spec, slow.entry_id, slow.how)
    assert fast.entry == slow.entry


def test_a_stale_or_broken_cache_file_is_never_used(tmp_path: Path) -> None:
    path = tmp_path / "hardware.pickle"
    assert load(path, "k", HardwareSnapshot) is None  # absent
    path.write_bytes(b"not a pickle")
    assert load(path, "k", HardwareSnapshot) is None  # garbage
    store(path, "old-key", known_hardware())
    assert load(path, "new-key", HardwareSnapshot) is None  # another version of the files or the package
    assert load(path, "old-key", dict) is None  # another kind of snapshot
    loaded = load(path, "old-key", HardwareSnapshot)
    assert isinstance(loaded, HardwareSnapshot) and loaded.gpus == known_hardware().gpus


def test_the_key_follows_every_database_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = source_key()
    target = sorted(packaged_dir("hardware_db").rglob("*.yaml"))[0]
    st = target.stat()
    try:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert source_key() != before
    finally:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert source_key() == before


def test_an_unwritable_cache_still_answers(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    store(blocked / "hardware.pickle", "k", _build())  # swallowed: nothing to write into
    assert not (blocked / "hardware.pickle").exists()


def test_a_cold_check_imports_no_schema_rich_or_report_code(tmp_path: Path) -> None:
    """What a `check --json` for a database model on a named GPU loads: no pydantic (its model classes cost more
    than the estimate), no rich (nothing is drawn), no jinja2, numpy, psutil or the report modules."""
    env = {**os.environ, "GEMMA_FIT_CACHE": str(tmp_path)}
    code = ("import sys, json\nfrom gemma_fit.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'rich', 'jinja2', 'numpy', 'psutil', 'gguf') or m in "
            "('gemma_fit.jobs.report', 'gemma_fit.present.html', 'gemma_fit.model.schema', "
            "'gemma_fit.hardware.schema'))),"
            " file=sys.stderr)")
    args = [sys.executable, "-c", code, "check", "--gpu", "a4000", "--model", "9b", "--json"]
    first = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr  # builds and stores the snapshot
    second = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stderr.strip().splitlines()[-1]) == []
    assert json.loads(first.stdout) == json.loads(second.stdout)
