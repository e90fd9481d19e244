#!/usr/bin/env bash
# Install gemma-fit with its test tools into .venv, build llama.cpp (CPU) once into
# ~/.cache/gemma-fit (reused afterwards), install Chromium for the HTML report test, then
# validate the databases, lint, type-check, and run every test. On two cores about 8.5 minutes with
# llama.cpp built, 14 from an empty cache (the build, printed in 10% steps, is 5.5); each step says so.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "[test.sh $(date +%H:%M:%S)] $*" >&2; }

step "installing gemma-fit and its test tools into .venv (about a minute)"
python3 -m venv .venv
. .venv/bin/activate
pip install -q -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing Debian's Chromium for the HTML report test (about a minute)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "chromium could not be installed: the browser test will say so and skip"
fi
step "compiling gemma-fit's bytecode (the tests start its command line hundreds of times)"
# Python reads these even where PYTHONDONTWRITEBYTECODE keeps it from writing them; without them every
# start of the CLI compiles the whole package again.
python -m compileall -q gemma_fit > /dev/null
step "llama.cpp for the CPU (built once into the cache: about 6 minutes the first time)"
python scripts/build_llamacpp.py
step "db validate, ruff, mypy"
gemma-fit db validate
ruff check .
mypy gemma_fit --ignore-missing-imports
# One pytest-xdist worker per core (serial on one core); --dist loadgroup keeps the tests that share a
# module's expensive fixture (xdist_group marks) in one worker. Zero-weight files and llama.cpp's answers are
# made once per session and shared by the workers (tests/shared.py); slow tests start first (tests/conftest.py).
workers=$(python -c 'import os; n = len(os.sched_getaffinity(0)); print(min(n, 8) if n > 1 else 0)')
step "pytest, $workers workers (3,473 tests, about 13 to 16 minutes of CPU: 6.5 to 9 minutes on two cores)"
pytest -q -n "$workers" --dist loadgroup
