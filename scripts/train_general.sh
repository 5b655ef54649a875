#!/usr/bin/env bash
# Trains the general English->French model from ../shared/data (or DATA), into RUN_DIR; run it again after any
# stop to continue where it left off (--resume). Extra arguments go to `train` (e.g. --max-seconds 7200: this
# call's budget, or --continue-from CHECKPOINT in a new RUN_DIR).
#
#   bash scripts/train_general.sh [--gpu] [--data DATA] [--run-dir RUN_DIR] [train arguments ...]
#
# The data: Hansard debates (a new random part of them each epoch), Tatoeba's everyday sentences less a dev
# set of 1,000 English sentences held out, WMT news and Multi30k captions, the small sets read several times
# an epoch; validated on FLORES dev, newstest2013, the Tatoeba dev set and Multi30k val (300 sentences of
# each, mean BLEU). DATA may hold the Hansard files xz-compressed (.xz) instead of gzipped. Every epoch's model is
# kept beside the best (general-epochN.safetensors), for `average` and for the epoch-by-epoch view.
#   --gpu  the shipped model: 6 encoder and 3 decoder layers (pre-norm), 16,000-token batches, dropout 0.1, bfloat16 on
#          one GPU (python3 from PATH, or PYTHON). Without it, a CPU-sized run: 4+3 layers, 4,000-token
#          batches and no dropout (a CPU run sees each pair about once, so there is nothing yet to overfit,
#          and a step without dropout takes 0.7 of the time), bfloat16 autocast where the cores have bfloat16
#          instructions.
set -euo pipefail
cd "$(dirname "$0")/.."
data="$(realpath -m ../shared/data)"
run="$PWD/runs/general"
profile=cpu
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) profile=gpu; shift ;;
    --data) data="$(realpath -m "$2")"; shift 2 ;;
    --run-dir) run="$(realpath -m "$2")"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ "$profile" = gpu ]; then
  python="${PYTHON:-python3}"
  setup=(--vocab-size 10000 --d-model 256 --n-heads 8 --d-ff 1024 --n-encoder-layers 6 --n-decoder-layers 3
         --dropout 0.1 --max-tokens 16000 --lr-factor 0.6 --warmup 2000 --norm-first --train-weights 0.5 2 3 2
         --keep-last 1000 --save-every 1000 --tokenizer-sample 1000000)
else
  python="${PYTHON:-.venv/bin/python}"
  [ -n "${PYTHON:-}" ] || bash scripts/install.sh
  setup=(--vocab-size 8000 --d-model 256 --n-heads 8 --d-ff 1024 --n-encoder-layers 4 --n-decoder-layers 3
         --dropout 0 --max-tokens 4000 --lr-factor 0.5 --warmup 800 --train-weights 0.3 2 2 1
         --keep-last 1000 --save-every 200 --tokenizer-sample 400000)
  grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && setup+=(--cpu-bfloat16)  # 0.65 of the float32 step where measured
fi
mkdir -p "$run"
en="$data/en-fr" m30k="$data/multi30k"
hansard="$en/hansard.train"
[ -f "$hansard.en.gz" ] && z=gz || z=xz
if [ ! -f "$run/data/tatoeba.train-dev.en.gz" ]; then
  "$python" -m transformer holdout --src "$en/tatoeba.train.en.gz" --tgt "$en/tatoeba.train.fr.gz" \
    --size 1000 --seed 1 --out-dir "$run/data"
fi
resume=()
[ -f "$run/general.state.safetensors" ] && resume=(--resume)
exec "$python" -m transformer train \
  --train-src "$hansard.en.$z" "$run/data/tatoeba.train-train.en.gz" "$en/wmtnews.train.en.gz" "$m30k/train.en.gz" \
  --train-tgt "$hansard.fr.$z" "$run/data/tatoeba.train-train.fr.gz" "$en/wmtnews.train.fr.gz" "$m30k/train.fr.gz" \
  --val-src "$en/flores.dev.en.gz" "$en/newstest2013.en.gz" "$run/data/tatoeba.train-dev.en.gz" "$m30k/val.en.gz" \
  --val-tgt "$en/flores.dev.fr.gz" "$en/newstest2013.fr.gz" "$run/data/tatoeba.train-dev.fr.gz" "$m30k/val.fr.gz" \
  --val-limit 300 --out "$run/general.safetensors" --max-len 128 --epochs 100 --patience 100 \
  "${setup[@]}" "${resume[@]}" "$@"
