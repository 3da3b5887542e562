#!/usr/bin/env bash
# The main job, end to end on Multi30k en-de, on a CPU:
#   1 prepare     raw text (downloaded, or copied from --from DIR / NMT_MULTI30K_DIR)
#   2 preprocess  Moses tokenization, joint BPE (10k merges), one joined dictionary
#   3 train       two models side by side (--models), one seed each: 3+3 layers, d_model 192, 4 heads, d_ff 768
#                 (examples/multi30k_cpu.yaml), for --minutes
#   4 average     each model's checkpoints of the budget's last 4%; kept only if its valid loss beats checkpoint_best's
#   5 translate   test_2016_flickr with beam 8, the models as an ensemble: detokenized sacreBLEU and chrF2, and
#                 BLEU on the papers' scale (lowercased, Moses-tokenized) printed (+ attention heatmaps)
#   6 plot        loss / perplexity / learning rate curves of the runs
# A rerun reuses finished steps; an interrupted training resumes from checkpoint_last.pt.
# Usage (from the repository root):
#   scripts/quickstart.sh [--from DIR] [--minutes N] [--models N] [--save-dir DIR] [-- EXTRA nmt-train FLAGS]
#   --from DIR      local copy of the Multi30k task1 raw files (train.en.gz, val.en.gz, ...)
#   --minutes N     training time in minutes (default 15; fractions allowed)
#   --models N      models trained side by side (seeds 1..N, the cores shared) that translate as an ensemble
#                   (default 2; 1: one model on all the cores, in --save-dir itself)
#   --save-dir DIR  checkpoints, logs, translations and plots (default checkpoints/multi30k_en_de)
#   after --        flags appended to nmt-train's (later flags win), e.g. -- --encoder-layers 6
set -euo pipefail
FROM=()
MINUTES=15
MODELS=2
SAVE=checkpoints/multi30k_en_de
EXTRA=()
usage="usage: scripts/quickstart.sh [--from DIR] [--minutes N] [--models N] [--save-dir DIR] [-- NMT_TRAIN_FLAGS]"
need() { [ "$2" -ge 2 ] || { echo "quickstart.sh: $1 needs a value ($usage)" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --from) need "$1" $#; [ -d "$2" ] || { echo "quickstart.sh: --from $2: no such folder" >&2; exit 2; }
            FROM=(--from "$(cd "$2" && pwd)"); shift 2 ;;
    --minutes) need "$1" $#; MINUTES="$2"; shift 2 ;;
    --models) need "$1" $#; MODELS="$2"; shift 2 ;;
    --save-dir) need "$1" $#; SAVE="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;   # the header comment, however long
    *) echo "quickstart.sh: unknown argument $1 ($usage)" >&2; exit 2 ;;
  esac
done
if ! awk -v m="$MINUTES" 'BEGIN { exit !(m + 0 > 0 && m ~ /^[0-9]*\.?[0-9]+$/) }'; then
  echo "quickstart.sh: --minutes $MINUTES: give a positive number of minutes, e.g. --minutes 15" >&2; exit 2
fi
if ! [[ "$MODELS" =~ ^[1-9][0-9]*$ ]]; then
  echo "quickstart.sh: --models $MODELS: give a whole number of models, e.g. --models 2 (or 1 for a single model)" >&2
  exit 2
fi
for flag in "${EXTRA[@]}"; do
  if [ "$MODELS" != 1 ] && [[ "$flag" == --seed || "$flag" == --seed=* ]]; then
    echo "quickstart.sh: $flag after --: with --models $MODELS each model has its own seed (1 to $MODELS); give --models 1 to choose the seed" >&2
    exit 2
  fi
done
RAW=raw/multi30k
BIN=data-bin/multi30k_en_de
HOURS=$(awk -v m="$MINUTES" 'BEGIN { printf "%.6g", m / 60 }')
# the shares of the training budget at which the checkpoints that may be averaged are taken (the same on any CPU)
AVERAGE_AT=0.96,0.97,0.98,0.99,1
step() { echo; echo "== $1 ($(date +%H:%M:%S))"; }
done_by() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }   # marker file $1 names the finished command $2
newer() { [ -f "$1" ] && [ "$(ls -t "$@" 2>/dev/null | head -n 1)" = "$1" ]; }   # file $1 exists and is the newest of "$@"

step "1/6 prepare Multi30k into $RAW"
nmt-prepare multi30k --dest "$RAW" "${FROM[@]}"

step "2/6 preprocess en-de into $BIN"
nmt-preprocess --source-lang en --target-lang de \
  --trainpref "$RAW/train" --validpref "$RAW/valid" --testpref "$RAW/test" \
  --destdir "$BIN" --tokenizer moses --bpe subword_nmt --bpe-merges 10000 \
  --joined-dictionary --workers 2

# bf16 where this machine's bf16 products are measured faster than fp32's (AMX, or AVX512-BF16 on an EPYC: 2-4x);
# elsewhere fp32 (emulated bf16 is several times slower; docs/mixed-precision.md)
PRECISION=()
if python3 -c "from nmt.hardware import bf16_is_faster; raise SystemExit(not bf16_is_faster())"; then PRECISION=(--bf16); fi

# The recipe: fairseq's Multi30k reference with 1,024-token batches, pre-norm, lr 2e-3 and dropout 0.2, the
# winners on the validation set after 15 minutes on a CPU (its comments and docs/recipes.md say by how much)
RECIPE="$(cd "$(dirname "$0")/.." && pwd)/examples/multi30k_cpu.yaml"
# Several models (--models N) train side by side, each on its share of the cores and with its own seed, and
# translate together as an ensemble: where one training cannot keep two cores busy, two make more updates in all
# than one, and an ensemble of two beats either of its models (docs/recipes.md says by how much, and where not).
CORES=$(nproc)
THREADS=$(( CORES / MODELS > 0 ? CORES / MODELS : 1 ))
MEMBERS=()   # the save folder of each model: SAVE itself for one, SAVE/model1 ... for several
if [ "$MODELS" = 1 ]; then MEMBERS=("$SAVE"); else for k in $(seq 1 "$MODELS"); do MEMBERS+=("$SAVE/model$k"); done; fi
train_command() {   # TRAIN = the nmt-train command of model $1, saving into $2
  TRAIN=(nmt-train "$BIN" --config "$RECIPE" "${PRECISION[@]}"
    --stop-time-hours "$HOURS" --save-dir "$2" --no-epoch-checkpoints
    --save-at-progress "$AVERAGE_AT" --log-interval 50)
  if [ "$MODELS" != 1 ]; then TRAIN+=(--num-threads "$THREADS" --seed "$1"); fi
  TRAIN+=("${EXTRA[@]}")
}
step "3/6 train $MODELS model(s) for $MINUTES minutes into $SAVE"
# Every training runs in the background and the script waits for them: a signal to the script (Ctrl-C, a kill)
# stops them all, and each saves a checkpoint the next run resumes from
PIDS=(); PID_DIRS=(); PID_RUNS=()
stop_trainings() {
  if [ ${#PIDS[@]} -gt 0 ]; then kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; fi
}
trap stop_trainings EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for k in $(seq 1 "$MODELS"); do
  dir=${MEMBERS[$((k - 1))]}
  train_command "$k" "$dir"
  RUN="${TRAIN[*]} # recipe $(cksum < "$RECIPE")"   # what a finished run is recognised by: command and recipe
  if done_by "$dir/quickstart_train.done" "$RUN"; then
    echo "quickstart: training already finished ($dir/quickstart_train.done); delete it or change --minutes to train again"
    continue
  fi
  [ -f "$dir/checkpoint_last.pt" ] && echo "quickstart: resuming from $dir/checkpoint_last.pt"
  if [ "$k" = 1 ]; then   # model 1's progress is what the terminal shows
    "${TRAIN[@]}" &
  else
    mkdir -p "$dir"
    echo "quickstart: model $k trains beside model 1 on $THREADS core(s) (--seed $k); its log: $dir/train.log"
    "${TRAIN[@]}" > "$dir/train.log" 2>&1 &
  fi
  PIDS+=($!); PID_DIRS+=("$dir"); PID_RUNS+=("$RUN")
done
RUNNING=("${!PIDS[@]}")   # the indices of the trainings not finished yet; a failure stops the others at once
while [ ${#RUNNING[@]} -gt 0 ]; do
  sleep 1
  STILL=()
  for i in "${RUNNING[@]}"; do
    if kill -0 "${PIDS[$i]}" 2>/dev/null; then STILL+=("$i"); continue; fi
    if ! wait "${PIDS[$i]}"; then
      echo "quickstart: the training into ${PID_DIRS[$i]} failed (its error is above, or in its train.log)" >&2
      exit 1
    fi
    echo "${PID_RUNS[$i]}" > "${PID_DIRS[$i]}/quickstart_train.done"
  done
  RUNNING=("${STILL[@]}")
done
PIDS=()

step "4/6 average the checkpoints taken at $AVERAGE_AT of the budget; keep the average only if its valid loss is lower"
valid_loss() { sed -n "s/.*| loss \([0-9.]*\) |.*$(basename "$1")\$/\1/p"; }
choose_checkpoint() {   # writes $1/quickstart_model.txt: the model's average or its checkpoint_best.pt
  local dir=$1 best=$1/checkpoint_best.pt avg=$1/checkpoint_avg.pt file=$1/quickstart_model.txt n k chosen
  if newer "$file" "$dir/checkpoint_last.pt"; then
    echo "quickstart: reusing the choice in $file: $(cat "$file")"; return
  fi
  n=$(find "$dir" -maxdepth 1 -name 'checkpoint_progress_*.pt' | wc -l)
  chosen="$best"
  if [ "$n" -ge 2 ]; then
    k=$(( n < 5 ? n : 5 ))
    nmt-average-checkpoints --inputs "$dir" --num-progress-checkpoints "$k" --output "$avg"
    scores=$(nmt-validate "$BIN" --path "$best:$avg")
    echo "$scores"
    best_loss=$(echo "$scores" | valid_loss "$best")
    avg_loss=$(echo "$scores" | valid_loss "$avg")
    if awk -v a="$avg_loss" -v b="$best_loss" 'BEGIN { exit !(a < b) }'; then
      chosen="$avg"
      echo "quickstart: the average of the last $k checkpoints wins (valid loss $avg_loss < $best_loss)"
    else
      echo "quickstart: checkpoint_best.pt wins (valid loss $best_loss <= average's $avg_loss)"
    fi
  else
    echo "quickstart: fewer than 2 checkpoints at $AVERAGE_AT of the budget (the run stopped early?); using checkpoint_best.pt"
  fi
  echo "$chosen" > "$file"
}
CHOSEN_MODELS=()
for dir in "${MEMBERS[@]}"; do
  choose_checkpoint "$dir"
  CHOSEN_MODELS+=("$(cat "$dir/quickstart_model.txt")")
done
CHOSEN_FILE="$SAVE/quickstart_model.txt"   # what translates: one checkpoint, or the models' joined by ':' (an ensemble)
CHOSEN=$(IFS=:; echo "${CHOSEN_MODELS[*]}")
if [ "$MODELS" != 1 ] && ! done_by "$CHOSEN_FILE" "$CHOSEN"; then echo "$CHOSEN" > "$CHOSEN_FILE"; fi

PLOTS="$SAVE/plots"
HAVE_MPL=1
python3 -c "import matplotlib" 2>/dev/null || HAVE_MPL=0
# Beam 8, not 5: ahead on valid for 12 of 14 models and ensembles of the recipe (+0.1 on average), its
# translations no shorter (docs/recipes.md)
BEAM=8
step "5/6 translate test_2016_flickr with beam $BEAM using $CHOSEN"
RESULTS="$SAVE/test"
ATTN=()
if [ "$HAVE_MPL" = 1 ]; then
  ATTN=(--attention-plot "$PLOTS/attention" --attention-plot-sentences 3)
fi
# Outputs are capped at 2 x source length + 10 tokens: a trained model never gets there on
# Multi30k; the cap keeps an untrained one from running on to fairseq's default limit, 200.
# --scoring bleu_lc_tok: beside sacreBLEU, BLEU as the Multi30k papers report it (lowercased, tokenized)
GENERATE=(nmt-generate "$BIN" --path "$CHOSEN" --gen-subset test --beam "$BEAM" --max-len-a 2 --max-len-b 10
  "${PRECISION[@]}" --max-tokens 4096 --results-path "$RESULTS" --scoring bleu_lc_tok "${ATTN[@]}")
TRANSLATED="$RESULTS/quickstart_generate.done"   # the command that wrote generate-test.txt
if newer "$RESULTS/generate-test.txt" "$CHOSEN_FILE" "${CHOSEN_MODELS[@]}" \
   && done_by "$TRANSLATED" "${GENERATE[*]}"; then
  echo "quickstart: reusing $RESULTS/generate-test.txt"
  grep -E "^(Generate test|[A-Za-z_]+( chrF)? signature:)" "$RESULTS/generate-test.txt"
else
  "${GENERATE[@]}"
  echo "${GENERATE[*]}" > "$TRANSLATED"
fi

step "6/6 plot the training curves"
LOGS=(); for dir in "${MEMBERS[@]}"; do LOGS+=("$dir/train_log.jsonl"); done
if [ "$HAVE_MPL" = 0 ]; then
  echo "quickstart: matplotlib is not installed, skipping the plots (pip install 'nmt[plot]' to get them)"
elif ! command -v nmt-plot >/dev/null; then
  echo "quickstart: nmt-plot not found, skipping the training curves"
elif newer "$PLOTS/training.png" "${LOGS[@]}"; then
  echo "quickstart: reusing $PLOTS/training.png"
else
  nmt-plot "${LOGS[@]}" --output "$PLOTS/training.png"   # several models: one curve each
fi

echo
echo "== done: model $CHOSEN; translations in $RESULTS/generate-test.txt; plots in $PLOTS"
grep -E "^Generate test" "$RESULTS/generate-test.txt" || true
