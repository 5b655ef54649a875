#!/usr/bin/env bash
# Installs the project and its test tools into .venv, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh requirements-dev.txt  # only when .venv lacks these requirements
.venv/bin/ruff check app.py pages ui transformer tests benchmarks
.venv/bin/ruff format --check app.py pages ui transformer tests benchmarks
.venv/bin/python -m pytest -q "$@"  # exit 5 (no tests collected) fails too
