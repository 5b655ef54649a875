#!/usr/bin/env bash
# On a machine with a GPU: the package's GPU tests (the CPU's tokens, maps, contributions and gradients, on the
# GPU); the app's own work for a visit on the GPU against 2 of the CPU's cores (the shipped default, then
# NLLB-600M's shape); and the Hugging Face families' decode rows on it, against transformers on the same GPU. Logs to
# $1 (default gpu-checks/). PYTHON names the interpreter (default: .venv's, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-checks}"
mkdir -p "$out"
python="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
export PYTHONUNBUFFERED=1 PYTHONPATH=".:tests${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import torch; assert torch.cuda.is_available(), 'no GPU'; print(torch.__version__, torch.cuda.get_device_name())"
# --noconftest: the suite's fixtures import the app's test tools (Streamlit), which these tests do not need
"$python" -m pytest -q --noconftest -p no:cacheprovider -rs tests/model/test_on_gpu.py 2>&1 | tee "$out/tests.log"
tests=${PIPESTATUS[0]}
"$python" -m benchmarks.app_on_device 2>&1 | tee "$out/app-on-device.log"
"$python" -m benchmarks.hf_families --quick --device cuda --app-on-device 2>&1 | grep -v "it/s\]" | tee "$out/hf-families-cuda.log"
exit "$tests"
