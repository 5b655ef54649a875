#!/usr/bin/env bash
# Installs the project and its test tools into .venv, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q -r requirements-dev.txt
.venv/bin/pip install -q -e .  # the package itself, importable from anywhere, and its console command
.venv/bin/ruff check app.py pages ui transformer tests benchmarks
.venv/bin/ruff format --check app.py pages ui transformer tests benchmarks
.venv/bin/python -m pytest -q "$@"  # exit 5 (no tests collected) fails too
