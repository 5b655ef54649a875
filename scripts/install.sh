#!/usr/bin/env bash
# Installs the project and a requirements file (default requirements.txt) into .venv, unless these very files were
# installed there already: a second start takes seconds instead of a reinstall.
#
#   bash scripts/install.sh [REQUIREMENTS_FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
requirements="${1:-requirements.txt}"
stamp=".venv/.installed-$(basename "$requirements")"
wanted="$(cat requirements.txt "$requirements" pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
  exit 0
fi
# A first install prints nothing of its own for minutes: say what it does and how long it takes (164 s measured).
echo "Installing the project and $requirements into .venv: about 3 minutes the first time; later starts skip it." >&2
started=$SECONDS
python3 -m venv .venv
.venv/bin/pip install -q -r "$requirements"
.venv/bin/pip install -q -e .  # the package itself, importable from anywhere, and its console command
echo "$wanted" >"$stamp"
echo "Installed in $((SECONDS - started)) s." >&2
