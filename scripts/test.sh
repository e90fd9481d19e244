#!/usr/bin/env bash
# Install gemma-fit with its test tools into .venv, build llama.cpp (CPU) once into
# ~/.cache/gemma-fit (reused afterwards), install Chromium for the HTML report test, then
# validate the databases, lint, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q -e '.[test]'
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "chromium could not be installed: the browser test will say so and skip"
fi
python scripts/build_llamacpp.py
gemma-fit db validate
ruff check .
pytest -q
