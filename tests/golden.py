"""Golden CLI outputs: the calls in tests/data/golden/cases.txt, run as a user runs them.

Recorded once before the issue-13 restructuring (`python tests/golden.py record`) and compared
byte for byte by tests/test_golden.py ever since: a move that changes what a user sees fails.
Paths to files the test writes are replaced by their placeholders; nothing here is timed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "data" / "golden"
CASES = GOLDEN / "cases.txt"
OUTPUTS = GOLDEN / "outputs.json"

# Zero-weight GGUFs written with `synth` for the `{gguf}` cases: (model, quant).
GGUFS = (
    ("gemma-3-270m", "Q4_K_M"),
    ("gemma-2-9b", "Q8_0"),
    ("gemma-3n-E2B", "Q4_K_M"),
    ("gemma-4-26B-A4B", "Q4_K_M"),
    ("gemma-3-4b", "BF16"),
    ("gemma-4-E2B", "Q6_K"),
)

PLACES = {
    "{m}": "tests/data/golden/machines",
    "{data}": "tests/data",
    "{examples}": "examples",
}


def cases() -> list[str]:
    lines = CASES.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMMA_FIT", "COLUMNS", "LINES"))}
    env.update(GEMMA_FIT_CACHE=str(cache), COLUMNS="120", LINES="50", NO_COLOR="1", TERM="dumb")
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gemma_fit", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _expand(case: str, gguf_dir: Path) -> list[str]:
    for key, value in {**PLACES, "{gguf}": str(gguf_dir)}.items():
        case = case.replace(key, value)
    return shlex.split(case)


def prepare(root: Path) -> None:
    """The `{gguf}` files (root/gguf) and the catalog snapshot of the cases' cache (root/cache), made before the
    cases run; the cases only read them, so one prepared folder serves any number of runs."""
    gguf_dir = root / "gguf"
    gguf_dir.mkdir(exist_ok=True)
    env = _env(root / "cache")
    _cli(["list", "quants"], env)  # builds the catalog snapshot once, before the parallel runs
    for model, quant in GGUFS:
        done = _cli(["synth", str(gguf_dir / f"{model}-{quant}.gguf"), "--model", model, "--quant", quant], env)
        assert done.returncode == 0, done.stderr


def run_cases(todo: list[str], root: Path, workers: int | None = None) -> dict[str, dict[str, object]]:
    """These cases' exit status, stdout and stderr, run in parallel in a folder made by prepare(), with its
    GGUF folder as `{gguf}`."""
    gguf_dir = root / "gguf"
    env = _env(root / "cache")
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2) as pool:
        runs = list(pool.map(lambda c: _cli(_expand(c, gguf_dir), env), todo))

    def scrub(text: str) -> str:
        return text.replace(str(gguf_dir), "{gguf}").replace(str(REPO), "{repo}")

    return {case: {"rc": r.returncode, "stdout": scrub(r.stdout), "stderr": scrub(r.stderr)}
            for case, r in zip(todo, runs, strict=True)}


def run_all(workers: int | None = None) -> dict[str, dict[str, object]]:
    """Every case's exit status, stdout and stderr, with the temporary GGUF folder as `{gguf}`."""
    with tempfile.TemporaryDirectory(prefix="gemma-fit-golden-") as tmp:
        prepare(Path(tmp))
        return run_cases(cases(), Path(tmp), workers)


def record() -> None:
    OUTPUTS.write_text(json.dumps(run_all(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python tests/golden.py record")
    record()
