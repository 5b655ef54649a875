#!/usr/bin/env bash
# Installs the project into .venv and starts the app on the shipped default checkpoint
# (http://localhost:8501; extra arguments go to `streamlit run`, e.g. --server.port 8502).
# ui.server.launch is `streamlit run app.py` with the default model loading from the process's start.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh  # only when .venv lacks these requirements
exec .venv/bin/python -m ui.server.launch "$@"
