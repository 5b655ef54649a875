#!/usr/bin/env bash
# Installs the project into .venv and translates a sentence with the shipped default checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt
echo "${1:-A man in a red shirt is riding a bicycle down the street.}" | .venv/bin/python -m transformer translate
