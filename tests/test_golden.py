"""What users see is unchanged: every call in tests/data/golden/cases.txt prints exactly what it
printed when recorded (exit status, stdout and stderr), across restructurings of the package.

The cases run in CHUNKS tests (every CHUNKS-th case each), so that pytest-xdist spreads them over its
workers, each chunk as many at a time as its worker has cores; the GGUF files and the catalog snapshot
they read are made once per session (golden.prepare).
"""

from __future__ import annotations

import json
from pathlib import Path

import golden
import pytest
from shared import cores_per_worker, once, shared_dir

CHUNKS = 12


def test_golden_cases_cover_every_command_and_engine() -> None:
    cases = golden.cases()
    assert len(cases) >= 100
    for needle in ("check ", "report ", "inspect ", "--engine ollama", "--engine vllm",
                   "--engine transformers", "--hardware", "--gguf", "cpu-ddr5"):
        assert any(needle in c for c in cases), needle


def _recorded() -> dict[str, dict[str, object]]:
    return json.loads(golden.OUTPUTS.read_text(encoding="utf-8"))


def test_golden_cases_are_the_recorded_ones() -> None:
    assert sorted(set(golden.cases())) == sorted(_recorded()), \
        "cases.txt changed: re-record with python tests/golden.py record"


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = shared_dir(tmp_path_factory, "golden")

    def prepare() -> None:
        golden.prepare(root)
        (root / "prepared").touch()

    once(root / "prepared", prepare)
    return root


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_golden_outputs_are_byte_identical(chunk: int, prepared: Path) -> None:
    recorded = _recorded()
    todo = golden.cases()[chunk::CHUNKS]
    now = golden.run_cases(todo, prepared, workers=cores_per_worker())
    changed = [case for case in todo if now[case] != recorded.get(case)]
    assert not changed, f"{len(changed)} outputs changed, first: {changed[0]}\n{now[changed[0]]}"
