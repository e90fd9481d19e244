"""scripts/build_llamacpp.py: a cached build whose llama-mem-probe is missing, unstamped or built from another
source of tools/llama_mem_probe.cpp is not taken as complete (the probe is then rebuilt alone)."""

from __future__ import annotations

from pathlib import Path

import build_llamacpp  # scripts/ is on sys.path (conftest.py)
import pytest


def test_probe_is_rebuilt_when_its_source_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = tmp_path / "bin"
    b.mkdir()
    for tool in build_llamacpp.TARGETS:
        (b / tool).write_text("")
    assert not build_llamacpp._have_all(b)  # no probe
    (b / build_llamacpp.PROBE).write_text("")
    assert not build_llamacpp._have_all(b)  # a probe without a stamp: built before stamps, rebuilt once
    stamp = b / f"{build_llamacpp.PROBE}.sha256"
    stamp.write_text(build_llamacpp.probe_stamp() + "\n")
    assert build_llamacpp._have_all(b)
    source = tmp_path / "llama_mem_probe.cpp"
    source.write_bytes(build_llamacpp.PROBE_SOURCE.read_bytes() + b"// changed\n")
    monkeypatch.setattr(build_llamacpp, "PROBE_SOURCE", source)
    assert not build_llamacpp._have_all(b)  # the source changed: the cached probe is stale
    stamp.write_text(build_llamacpp.probe_stamp() + "\n")
    assert build_llamacpp._have_all(b)
