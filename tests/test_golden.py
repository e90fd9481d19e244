"""What users see is unchanged: every call in tests/data/golden/cases.txt prints exactly what it
printed when recorded (exit status, stdout and stderr), across restructurings of the package."""

from __future__ import annotations

import json

import golden


def test_golden_cases_cover_every_command_and_engine() -> None:
    cases = golden.cases()
    assert len(cases) >= 100
    for needle in ("check ", "report ", "inspect ", "--engine ollama", "--engine vllm",
                   "--engine transformers", "--hardware", "--gguf", "cpu-ddr5"):
        assert any(needle in c for c in cases), needle


def test_golden_outputs_are_byte_identical() -> None:
    recorded = json.loads(golden.OUTPUTS.read_text(encoding="utf-8"))
    now = golden.run_all()
    assert sorted(now) == sorted(recorded), "cases.txt changed: re-record with python tests/golden.py record"
    changed = [case for case in recorded if now[case] != recorded[case]]
    assert not changed, f"{len(changed)} outputs changed, first: {changed[0]}\n{now[changed[0]]}"
