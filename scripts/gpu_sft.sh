#!/usr/bin/env bash
# gpu_sft.sh OUTDIR: training the model on the GPU machine (from the
# repository root), in runs named by RUNS, each under its own time limit;
# the runs named by BRING come back as model directories (`dragon train
# export --pack`: bf16 safetensors, zstd) to be judged (`dragon eval`) and
# committed.
#
# A run is NAME=CONFIG[:DATA[:STEPS[:INIT]]]: configs/sft/CONFIG.cfg on
# DATA (default: the labelled examples, data/examples/train.jsonl.zst; `pre`
# stands for the structure examples, data/examples/pretrain.jsonl.zst) for
# STEPS steps (default: the config's), starting from the weights of the
# run INIT (a run named earlier: fine-tuning after pretraining) or from
# random ones. Every run uses one tokenizer: the first run trains it on its
# data (--vocab 2048) and the others are handed it. A run that fails or
# runs out of time is noted and the next one starts; none starts past
# DEADLINE seconds.
#
#   RUNS      default "m=m s=s l=l m-long=m::3000": the model-size sweep at
#             a fixed token budget (the configs' 1,200 steps), then the
#             middle size longer. "pre=m:pre:4000 m-ft=m::1500:pre
#             m-scratch=m::1500" pretrains on the structure examples, then
#             fine-tunes on the labels, beside a run on the labels alone.
#   BRING     runs that come back (default: the last run)
#   EVAL      runs (or model directories of the tree, such as
#             models/little-dragon) judged here after training (`dragon eval --split val
#             --limit EVAL_LIMIT`, default 50; on this machine's GPU, the
#             outputs written on every core): Correct@1, fast_2, fast_10,
#             into logs.tgz and the summary (default: none)
#   EVAL_S    seconds an evaluation may take (default 120)
#   EVAL_ARGS more flags for each evaluation (e.g. "--labelled --against
#             FILE": the search's labels, or another writer's outputs on the
#             same tasks, judged beside the run's in the same batch)
#   BUILD     where dragon is (default build-gpu; built here without it)
#   LIMIT     seconds a run may take (default 150)
#   DEADLINE  seconds from the start after which no run starts (default 420)
#   DEVICE    cuda (default) or cpu (the C reference: a check of the script
#             itself with a small config, anywhere)
#
# OUTDIR gets summary.txt, logs.tgz (every run's log.jsonl, config.txt and
# progress) and the runs of BRING as one tar archive of model directories
# cut into 15 MiB pieces, models.tar.00, .01, ... (`cat models.tar.* | tar x`).
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu_sft.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$(dirname "$0")/.." || exit 1
LOGDIR=$(mktemp -d /tmp/dragon-sft-logs.XXXXXX)
BUILD=${BUILD:-build-gpu}
RUNS=${RUNS:-m=m s=s l=l m-long=m::3000}
LIMIT=${LIMIT:-150}
DEADLINE=${DEADLINE:-420}
DEVICE=${DEVICE:-cuda}
LABELS=data/examples/train.jsonl.zst
PRE=data/examples/pretrain.jsonl.zst
t_start=$(date +%s)
. scripts/log_steps.sh
. scripts/debs_env.sh
note "$DEBS_NOTE"
machine_log "$DEVICE"
[ -x "$BUILD/dragon" ] || build_logged "$BUILD/dragon"
DRAGON=./$BUILD/dragon
DIRS=/tmp/dragon-sft-runs
rm -rf "$DIRS"
mkdir -p "$DIRS"

# The final validation loss of a run directory, or "none".
final_val() {
  grep '"val_loss"' "$1/log.jsonl" 2>/dev/null | tail -1 |
    sed -n 's/.*"val_loss": *\([0-9.eE+-]*\).*/\1/p' | grep . || echo none
}

TOKENIZER=""
last=""
for spec in $RUNS; do
  name=${spec%%=*}
  IFS=: read -r cfg data steps init <<<"${spec#*=}"
  [ "$data" = pre ] && data=$PRE
  data=${data:-$LABELS}
  if [ $(($(date +%s) - t_start)) -ge "$DEADLINE" ]; then
    note "run $name: not started (past the deadline of $DEADLINE s)"
    continue
  fi
  args=(--device "$DEVICE" --data "$data" --config "configs/sft/$cfg.cfg" --out "$DIRS/$name")
  if [ -n "$TOKENIZER" ]; then args+=(--tokenizer "$TOKENIZER"); else args+=(--vocab 2048); fi
  [ -n "$steps" ] && args+=(--steps "$steps")
  if [ -n "$init" ]; then
    if [ ! -f "$DIRS/$init/latest" ]; then
      note "run $name: not started (run $init has no checkpoint)"
      continue
    fi
    args+=(--init "$DIRS/$init/model_$(cat "$DIRS/$init/latest").bin")
  fi
  t=$(date +%s)
  timeout -s INT -k 20 "$LIMIT" "$DRAGON" train sft "${args[@]}" >"$LOGDIR/$name.out" 2>"$LOGDIR/$name.log"
  rc=$?
  [ -z "$TOKENIZER" ] && [ -f "$DIRS/$name/tokenizer.bin" ] && TOKENIZER=$DIRS/$name/tokenizer.bin
  note "run $name ($cfg on $(basename "$data")${init:+ from $init}): exit $rc in $(($(date +%s) - t)) s;" \
    "final val loss $(final_val "$DIRS/$name"); $(grep -o 'steps 0\.\.[0-9]*.*' "$LOGDIR/$name.out" | head -1)" \
    "$(grep -o '[0-9]* tok/s' "$LOGDIR/$name.log" | tail -1)"
  [ $rc -eq 0 ] || tail -3 "$LOGDIR/$name.log"
  last=$name
done

# The runs judged here, on the validation split: a run's name, or a model
# directory of the tree (models/little-dragon: the shipped model, judged on
# the same tasks in the same call).
for name in ${EVAL:-}; do
  model=$DIRS/$name
  if [ ! -f "$model/latest" ]; then
    if [ -d "$name" ]; then
      model=$name
      name=$(basename "$name")
    else
      note "eval $name: no checkpoint"
      continue
    fi
  fi
  target=cuda
  [ "$DEVICE" = cpu ] && target=c
  timeout -s INT -k 10 "${EVAL_S:-120}" "$DRAGON" eval --split val --limit "${EVAL_LIMIT:-50}" \
    --model "$model" --target "$target" --out "$LOGDIR/eval/$name" ${EVAL_ARGS:-} >"$LOGDIR/eval-$name.out" \
    2>"$LOGDIR/eval-$name.log"
  note "eval $name: exit $?; $(grep -m1 '^# ' "$LOGDIR/eval-$name.out")"
done

# The runs that come back, as packed model directories.
mkdir -p "$LOGDIR/models"
for name in ${BRING:-$last}; do
  if [ -f "$DIRS/$name/latest" ] &&
    "$DRAGON" train export --model "$DIRS/$name" --out "$LOGDIR/models/$name" --pack \
      >"$LOGDIR/export-$name.log" 2>&1; then
    note "brought: $name ($(tail -1 "$LOGDIR/export-$name.log"))"
    cp "$DIRS/$name/log.jsonl" "$LOGDIR/models/$name/"
  else
    note "brought: $name FAILED ($(tail -1 "$LOGDIR/export-$name.log" 2>/dev/null))"
  fi
done
if [ -n "$(ls "$LOGDIR/models")" ]; then
  tar cf "$LOGDIR/models.tar" -C "$LOGDIR/models" .
  split -b 15M -d "$LOGDIR/models.tar" "$OUTDIR/models.tar."
  rm -rf "$LOGDIR/models" "$LOGDIR/models.tar"
fi
for r in "$DIRS"/*/; do
  n=$(basename "$r")
  mkdir -p "$LOGDIR/runs/$n"
  cp "$r/log.jsonl" "$r/config.txt" "$LOGDIR/runs/$n/" 2>/dev/null
done
cp "$LOGDIR/summary.txt" "$OUTDIR/"
tar czf "$OUTDIR/logs.tgz" -C "$LOGDIR" .
