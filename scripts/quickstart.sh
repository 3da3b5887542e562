#!/usr/bin/env bash
# The main job, end to end on Multi30k en-de: prepare the raw text, then preprocess it
# (Moses tokenization, joint BPE with 10k merges, one joined dictionary, 2 workers).
# Finished steps are reused on a rerun (nmt-prepare keeps raw/multi30k/.prepared.json,
# nmt-preprocess reports "up to date" when options and inputs are unchanged).
# Usage (from the repository root): scripts/quickstart.sh [--from DIR]
#   --from DIR   a local copy of the Multi30k task1 raw files (train.en.gz, val.en.gz, ...);
#                without it the files are downloaded (or NMT_MULTI30K_DIR is used).
set -euo pipefail
FROM=()
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || { echo "quickstart.sh: --from needs a folder" >&2; exit 2; }
            FROM=(--from "$(cd "$2" && pwd)"); shift 2 ;;
    --from=*) FROM=(--from "$(cd "${1#--from=}" && pwd)"); shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "quickstart.sh: unknown argument $1 (usage: scripts/quickstart.sh [--from DIR])" >&2; exit 2 ;;
  esac
done
RAW=raw/multi30k
BIN=data-bin/multi30k_en_de

echo "== 1/2 prepare Multi30k into $RAW"
nmt-prepare multi30k --dest "$RAW" "${FROM[@]}"

echo "== 2/2 preprocess en-de into $BIN"
nmt-preprocess --source-lang en --target-lang de \
  --trainpref "$RAW/train" --validpref "$RAW/valid" --testpref "$RAW/test" \
  --destdir "$BIN" --tokenizer moses --bpe subword_nmt --bpe-merges 10000 \
  --joined-dictionary --workers 2

echo "== done: binarized data in $BIN (see $BIN/metadata.json)"
