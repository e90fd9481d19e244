#!/usr/bin/env bash
# Install gemma-fit with its test tools into .venv, build llama.cpp (CPU) once into
# ~/.cache/gemma-fit (reused afterwards), then lint and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q -e '.[test]'
python scripts/build_llamacpp.py
ruff check .
pytest -q
