"""`gemma-fit synth`: exact layout, sparse on disk, readable by the gguf package, safe on failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from shared import PlainGGUFReader, SynthFiles

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.layout import synth_file_bytes
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.writer import write_synthetic_gguf
from gemma_fit.model.catalog import resolve_model


@pytest.mark.parametrize(("model", "quant"), [("gemma-2-2b", "Q4_K_M"), ("gemma-3n-E2B", "Q6_K"),
                                              ("gemma-4-26B-A4B", "IQ4_XS")])
def test_synth_writes_the_plan(model: str, quant: str, synth: SynthFiles) -> None:
    """The session's file (written once, by write_synthetic_gguf; the other tests read it too)."""
    plan = build_plan(resolve_model(model).spec, quant)
    out, size = synth(model, quant).path, synth(model, quant).size  # size: what write_synthetic_gguf returned
    assert size == out.stat().st_size == synth_file_bytes(plan)
    reader = PlainGGUFReader(out)  # the gguf package's reader (see shared.py)
    got = [(t.name, tuple(int(x) for x in t.shape), t.tensor_type.name) for t in reader.tensors]
    want = [(t.name, t.shape, t.type.name) for t in plan.tensors]
    assert got == want
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == plan.model.arch


def test_synth_is_sparse_and_fast(synth: SynthFiles) -> None:
    st = synth("gemma-3-27b", "BF16").path.stat()
    assert st.st_size > 50 * 2**30
    assert st.st_blocks * 512 < 64 * 2**20  # the 50 GiB of weights take no disk space


def test_unwritable_output_leaves_nothing(tmp_path: Path) -> None:
    plan = build_plan(resolve_model("gemma-3-270m").spec, "Q8_0")
    if os.geteuid() == 0:  # root writes anywhere on disk; /proc refuses even root
        with pytest.raises(BadInput, match="cannot write"):
            write_synthetic_gguf(plan, Path("/proc/gemma-fit-test.gguf"))
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        with pytest.raises(BadInput, match="cannot write"):
            write_synthetic_gguf(plan, locked / "x.gguf")
        assert list(locked.iterdir()) == []
    finally:
        os.chmod(locked, 0o700)


def test_failure_while_writing_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gemma_fit.gguf.writer as synth

    def boom(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(synth.GGUFWriter, "write_ti_data_to_file", boom)
    plan = build_plan(resolve_model("gemma-3-270m").spec, "Q8_0")
    with pytest.raises(BadInput, match="No space left"):
        write_synthetic_gguf(plan, tmp_path / "x.gguf")
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_bad_input(tmp_path: Path) -> None:
    plan = build_plan(resolve_model("gemma-3-270m").spec, "Q8_0")
    with pytest.raises(BadInput, match="does not exist"):
        write_synthetic_gguf(plan, tmp_path / "nope" / "x.gguf")


def test_existing_file_is_replaced_atomically(tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    out.write_bytes(b"old")
    plan = build_plan(resolve_model("gemma-3-270m").spec, "Q8_0")
    write_synthetic_gguf(plan, out)
    assert out.stat().st_size == synth_file_bytes(plan)
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]
