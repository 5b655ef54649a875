#!/usr/bin/env bash
# What a general English->French checkpoint translates, in the figures the shipped default is judged by: greedy and
# beam-5 sacreBLEU and chrF on FLORES dev, newstest2013, the Tatoeba dev set and Multi30k test2016, the five
# sentences newcomers and teachers type first, and the best cross-attention head's AER on the pairs aligned by hand.
#
#   bash scripts/evaluate_general.sh CHECKPOINT [--data DATA] [--limit N]
#
# DATA is ../shared/data by default; the Tatoeba dev set is held out of tatoeba.train as train_general.sh holds it
# (1,000 English sentences, seed 1). --limit N scores the first N sentences of each set only (a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
checkpoint="$(realpath "$1")"
shift
data="$(realpath -m ../shared/data)"
limit=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="$(realpath -m "$2")"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
en="$data/en-fr" m30k="$data/multi30k"
"$python" -m transformer holdout --src "$en/tatoeba.train.en.gz" --tgt "$en/tatoeba.train.fr.gz" --size 1000 --seed 1 \
  --out-dir "$work" >/dev/null
sets=("flores.dev:$en/flores.dev" "newstest2013:$en/newstest2013" "tatoeba-dev:$work/tatoeba.train-dev"
      "multi30k-test2016:$m30k/test_2016_flickr")
srcs=() refs=()
for entry in "${sets[@]}"; do
  name="${entry%%:*}" stem="${entry#*:}"
  srcs+=("$work/$name.en") refs+=("$work/$name.fr")
  for side in en fr; do
    if [ "$limit" -gt 0 ]; then
      { zcat "$stem.$side.gz" | head -n "$limit" >"$work/$name.$side"; } || true  # head closes the pipe early
    else
      zcat "$stem.$side.gz" >"$work/$name.$side"
    fi
  done
done
# one process for every set and width: the model is loaded once
"$python" -m transformer evaluate --checkpoint "$checkpoint" --src "${srcs[@]}" --ref "${refs[@]}" --beam 1 5 \
  2>/dev/null
echo
printf '%s\n' "I love you." "Where is the train station?" "I am a student." \
  "The agreement on the European Economic Area was signed in August 1992." \
  "The animal didn't cross the street because it was too tired." >"$work/five.en"
paste -d '\t' "$work/five.en" <("$python" -m transformer translate --checkpoint "$checkpoint" --input "$work/five.en" \
  2>/dev/null) | sed 's/\t/ -> /'
echo
"$python" -m transformer align --checkpoint "$checkpoint" --src tests/data/alignment/en.txt \
  --tgt tests/data/alignment/fr.txt --gold tests/data/alignment/gold.txt --top 3 2>/dev/null
