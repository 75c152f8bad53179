#!/usr/bin/env bash
# gpu_sft.sh OUTDIR: supervised fine-tuning on the GPU machine (from the
# repository root): the model-size sweep at a fixed token budget, then,
# while time is left, the shipped size trained longer; the chosen run
# comes back to be committed.
#
# Every run trains on the committed examples (DATA, zstd JSON lines) with
# one tokenizer (trained by the first run on the examples, --vocab 2048,
# and handed to the others), on the CUDA model (`dragon train sft --device
# cuda`), each under its own time limit; a run that fails or runs out of
# time is noted and the next one starts. Each config in configs/sft/ fixes
# the model and the training keys (batch, steps, learning rate), so the
# sweep's runs see the same examples in the same order for the same number
# of steps. Validation loss is on the config's val_fraction of the
# examples (drawn by a hash of their tokens).
#
#   BUILD      where dragon is (default build-gpu; built here without it)
#   DATA       examples (default data/examples/train.jsonl.zst)
#   CONFIGS    the sweep, in order (default "m s l": the shipped size first)
#   LIMIT      seconds a sweep run may take (default 150)
#   SHIP       the config whose run comes back (default m)
#   LONG_STEPS the shipped config again with this many steps, if DEADLINE
#              allows (default 3000; 0: not run)
#   DEADLINE   seconds from the start after which no run starts (default 420)
#   DEVICE     cuda (default) or cpu (the C reference: a check of the
#              script itself with a small config, anywhere)
#
# OUTDIR gets summary.txt, logs.tgz (every run's log.jsonl, config.txt and
# progress) and the chosen run (the SHIP run of lower final validation
# loss: its config, tokenizer, latest, log and model) as a tar archive cut
# into 15 MiB pieces, ship.tar.00, .01, ... (`cat ship.tar.* | tar x`).
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu_sft.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$(dirname "$0")/.." || exit 1
LOGDIR=$(mktemp -d /tmp/dragon-sft-logs.XXXXXX)
BUILD=${BUILD:-build-gpu}
DATA=${DATA:-data/examples/train.jsonl.zst}
CONFIGS=${CONFIGS:-m s l}
LIMIT=${LIMIT:-150}
SHIP=${SHIP:-m}
LONG_STEPS=${LONG_STEPS:-3000}
DEADLINE=${DEADLINE:-420}
DEVICE=${DEVICE:-cuda}
t_start=$(date +%s)
. scripts/log_steps.sh
. scripts/debs_env.sh
note "$DEBS_NOTE"
{
  date -u
  [ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nproc
} >"$LOGDIR/machine.txt" 2>&1
[ -x "$BUILD/dragon" ] || build_logged "$BUILD/dragon"
DRAGON=./$BUILD/dragon
RUNS=/tmp/dragon-sft-runs
rm -rf "$RUNS"
mkdir -p "$RUNS"

# The final validation loss of a run directory, or "none".
final_val() {
  grep '"val_loss"' "$1/log.jsonl" 2>/dev/null | tail -1 |
    sed -n 's/.*"val_loss": *\([0-9.eE+-]*\).*/\1/p' | grep . || echo none
}

# run NAME CONFIG LIMIT [ARGS...]: one training run into $RUNS/NAME.
TOKENIZER=""
run() {
  local name=$1 cfg=$2 limit=$3
  shift 3
  local tokargs=(--vocab 2048)
  [ -n "$TOKENIZER" ] && tokargs=(--tokenizer "$TOKENIZER")
  local t=$(date +%s)
  timeout -s INT -k 20 "$limit" "$DRAGON" train sft --device "$DEVICE" --data "$DATA" \
    --config "configs/sft/$cfg.cfg" --out "$RUNS/$name" "${tokargs[@]}" "$@" \
    >"$LOGDIR/$name.out" 2>"$LOGDIR/$name.log"
  local rc=$?
  [ -z "$TOKENIZER" ] && [ -f "$RUNS/$name/tokenizer.bin" ] && TOKENIZER=$RUNS/$name/tokenizer.bin
  note "run $name ($cfg): exit $rc in $(($(date +%s) - t)) s; final val loss $(final_val "$RUNS/$name");" \
    "$(grep -o 'steps 0\.\.[0-9]*.*' "$LOGDIR/$name.out" | head -1)" \
    "$(grep -o '[0-9]* tok/s' "$LOGDIR/$name.log" | tail -1)"
  [ $rc -eq 0 ] || tail -3 "$LOGDIR/$name.log"
}

for c in $CONFIGS; do
  if [ $(($(date +%s) - t_start)) -ge "$DEADLINE" ]; then
    note "run $c: not started (past the deadline of $DEADLINE s)"
    continue
  fi
  run "$c" "$c" "$LIMIT"
done
if [ "$LONG_STEPS" -gt 0 ]; then
  left=$((DEADLINE - ($(date +%s) - t_start)))
  if [ "$left" -gt 60 ]; then
    run "$SHIP-long" "$SHIP" "$left" --steps "$LONG_STEPS"
  else
    note "run $SHIP-long: not started ($left s left before the deadline)"
  fi
fi

# The shipped size's run of lower final validation loss comes back whole
# (a run that never validated is never chosen).
best=""
best_loss=""
for r in "$RUNS/$SHIP" "$RUNS/$SHIP-long"; do
  l=$(final_val "$r")
  [ "$l" = none ] && continue
  [ -f "$r/latest" ] || continue
  if [ -z "$best" ] || awk -v a="$l" -v b="$best_loss" 'BEGIN { exit !(a < b) }'; then
    best=$r
    best_loss=$l
  fi
done
if [ -n "$best" ]; then
  step=$(cat "$best/latest")
  tar cf "$LOGDIR/ship.tar" -C "$best" config.txt tokenizer.bin latest log.jsonl "model_$step.bin"
  split -b 15M -d "$LOGDIR/ship.tar" "$OUTDIR/ship.tar."
  note "shipped: $(basename "$best") at step $step, val loss $best_loss ($(du -h "$LOGDIR/ship.tar" | cut -f1))"
else
  note "shipped: nothing (no $SHIP run finished with a validation loss)"
fi
for r in "$RUNS"/*/; do
  n=$(basename "$r")
  mkdir -p "$LOGDIR/runs/$n"
  cp "$r/log.jsonl" "$r/config.txt" "$LOGDIR/runs/$n/" 2>/dev/null
done
rm -f "$LOGDIR/ship.tar"
cp "$LOGDIR/summary.txt" "$OUTDIR/"
tar czf "$OUTDIR/logs.tgz" -C "$LOGDIR" .
