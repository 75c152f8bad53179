#!/usr/bin/env bash
# gpu_grpo.sh OUTDIR: a GRPO run on the GPU machine (from the repository
# root): `dragon train grpo --device cuda --target cuda` from a model (the
# shipped one by default), its rewards timed on the GPU beside the untuned
# baseline, for LIMIT seconds; then the run is judged beside its starting
# model on the validation split (`dragon eval`, EVAL_LIMIT tasks each, on
# this GPU) and comes back: its log, plot and the last step as a packed
# model directory, to be committed if it beats the start.
#
# Carry .debs (scripts/fetch_debs.sh) and a dragon built beforehand
# (BUILD=build-gpu), and for GPU_TESTS=1 its dragon_tests.
#
#   INIT        the starting model (default models/little-dragon)
#   RESUME      a run directory carried here to continue (then INIT is unused)
#   GRPO_ARGS   more flags for `dragon train grpo` (default "--prompts 16
#               --samples 8 --lr 1e-5 --warmup 5 --eps-high 0.28")
#   STEPS       steps at most (default 1000: the run stops at LIMIT)
#   LIMIT       seconds the run may take (default 300; a step cut short is
#               not lost work: every finished step is checkpointed)
#   EVAL_LIMIT  validation tasks a model (default 20; 0: no evaluation)
#   EVAL_S      seconds an evaluation may take (default 90)
#   GPU_TESTS=1 first the GRPO, GPU-writing and CUDA-model GPU tests (at most 240 s)
#   DEVICE      cuda (default) or cpu (the C reference, the C emulation: a
#               check of the script itself, anywhere, with small GRPO_ARGS)
#
# OUTDIR gets summary.txt, logs.tgz (the run's log.jsonl, grpo.cfg, plot,
# progress, the evaluations) and the last step as a packed model directory
# (`dragon train export --pack`) in 15 MiB pieces, model.tar.00, .01, ...
# (`cat model.tar.* | tar x` gives grpo/).
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu_grpo.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$(dirname "$0")/.." || exit 1
LOGDIR=$(mktemp -d /tmp/dragon-grpo-logs.XXXXXX)
BUILD=${BUILD:-build-gpu}
INIT=${INIT:-models/little-dragon}
GRPO_ARGS=${GRPO_ARGS:---prompts 16 --samples 8 --lr 1e-5 --warmup 5 --eps-high 0.28}
STEPS=${STEPS:-1000}
LIMIT=${LIMIT:-300}
EVAL_LIMIT=${EVAL_LIMIT:-20}
DEVICE=${DEVICE:-cuda}
TARGET=cuda
[ "$DEVICE" = cpu ] && TARGET=c
. scripts/log_steps.sh
. scripts/debs_env.sh
note "$DEBS_NOTE"
machine_log "$DEVICE"
[ -x "$BUILD/dragon" ] || build_logged "$BUILD/dragon"
DRAGON=./$BUILD/dragon

if [ -n "${GPU_TESTS:-}" ]; then
  [ -x "$BUILD/dragon_tests" ] || build_logged "$BUILD/dragon_tests"
  DRAGON_BIN=$DRAGON timeout 240 "./$BUILD/dragon_tests" gpu_grpo gpu_nn_sft gpu_decode gpu_optimize gpu_measure >"$LOGDIR/gpu_tests.txt" 2>&1
  note "gpu tests: exit $?; $(tail -1 "$LOGDIR/gpu_tests.txt")"
fi

RUN=/tmp/dragon-grpo-run
if [ -n "${RESUME:-}" ]; then
  rm -rf "$RUN"
  cp -r "$RESUME" "$RUN"
  start=(--resume)
else
  rm -rf "$RUN"
  start=(--init "$INIT")
fi
t=$(date +%s)
# shellcheck disable=SC2086
timeout -s INT -k 20 "$LIMIT" "$DRAGON" train grpo --device "$DEVICE" --target "$TARGET" --out "$RUN" \
  "${start[@]}" --steps "$STEPS" $GRPO_ARGS >"$LOGDIR/grpo.out" 2>"$LOGDIR/grpo.log"
rc=$?
steps=$(grep -c . "$RUN/log.jsonl" 2>/dev/null || echo 0)
note "grpo: exit $rc in $(($(date +%s) - t)) s; $steps steps logged; last: $(tail -1 "$RUN/log.jsonl" 2>/dev/null)"
[ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || tail -3 "$LOGDIR/grpo.log"
# the plot of what was logged, whether or not the run was stopped
"$DRAGON" train grpo --out "$RUN" --resume --steps 1 --quiet >/dev/null 2>&1

if [ -f "$RUN/latest" ]; then
  if "$DRAGON" train export --model "$RUN" --out "$LOGDIR/model/grpo" --pack >"$LOGDIR/export.log" 2>&1; then
    note "brought: $(tail -1 "$LOGDIR/export.log")"
    tar cf "$LOGDIR/model.tar" -C "$LOGDIR/model" grpo
    split -b 15M -d "$LOGDIR/model.tar" "$OUTDIR/model.tar."
    rm -f "$LOGDIR/model.tar"
  else
    note "export FAILED: $(tail -1 "$LOGDIR/export.log")"
  fi
fi
cp "$RUN"/log.jsonl "$RUN"/grpo.cfg "$RUN"/grpo.png "$RUN"/grpo.svg "$LOGDIR/" 2>/dev/null

# The run against its start, on the validation split.
if [ "$EVAL_LIMIT" -gt 0 ]; then
  for name in start grpo; do
    model=$INIT
    [ "$name" = grpo ] && model=$LOGDIR/model/grpo
    [ -d "$model" ] || continue
    timeout -s INT -k 10 "${EVAL_S:-90}" "$DRAGON" eval --split val --limit "$EVAL_LIMIT" \
      --model "$model" --target "$TARGET" --out "$LOGDIR/eval/$name" >"$LOGDIR/eval-$name.out" \
      2>"$LOGDIR/eval-$name.log"
    note "eval $name: exit $?; $(grep -m1 '^# ' "$LOGDIR/eval-$name.out")"
  done
fi
cp "$LOGDIR/summary.txt" "$OUTDIR/"
tar czf "$OUTDIR/logs.tgz" --exclude=model -C "$LOGDIR" .
