"""The sample reports in reports/ are what `python scripts/make_reports.py` makes now, byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STALE = "reports are stale: run python scripts/make_reports.py"


def test_sample_reports_are_current(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "make_reports.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    fresh = {p.name: p.read_bytes() for p in sorted(tmp_path.iterdir())}
    committed = {p.name: p.read_bytes() for p in sorted((REPO / "reports").iterdir())
                 if p.suffix in (".html", ".json")}
    assert fresh, "make_reports.py wrote nothing"
    assert sorted(fresh) == sorted(committed), f"{STALE} (files differ: {sorted(set(fresh) ^ set(committed))})"
    differ = [name for name in fresh if fresh[name] != committed[name]]
    assert not differ, f"{STALE} ({', '.join(differ)} differ)"
