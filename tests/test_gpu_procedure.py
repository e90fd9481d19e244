"""The GPU machine writes zero-weight files with the standard library only: they must be exactly
the files `gemma-fit synth` writes (benchmarks/gpu/device_measure.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.writer import write_synthetic_gguf
from gemma_fit.model.catalog import resolve_model

GPU = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu"


def _device_module():
    spec = importlib.util.spec_from_file_location("device_measure", GPU / "device_measure.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_device_writer_matches_synth(tmp_path: Path) -> None:
    plans = json.loads((GPU / "plans.json").read_text())
    dm = _device_module()
    for plan in plans[:2]:
        mine, ref = tmp_path / "mine.gguf", tmp_path / "ref.gguf"
        size = dm.write_gguf(plan, mine)
        write_synthetic_gguf(build_plan(resolve_model(plan["model"]).spec, plan["quant"]), ref)
        assert size == ref.stat().st_size == mine.stat().st_size
        with open(mine, "rb") as a, open(ref, "rb") as b:
            assert a.read(32 * 2**20) == b.read(32 * 2**20)
