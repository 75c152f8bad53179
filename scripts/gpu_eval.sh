#!/usr/bin/env bash
# gpu_eval.sh OUTDIR: a model judged on held-out splits on the GPU machine
# (from the repository root): `dragon eval --target cuda` (the graphs written
# on the GPU, checked on fresh inputs, timed beside each workload's untuned
# baseline in the same run), one split after another, each within its share
# of the time. Each split's JSON, table and task log come back in one archive
# (OUTDIR/eval.tgz), with summary.txt; an evaluation cut short keeps the
# tasks it judged (OUT/SPLIT.tasks.jsonl) and a later call with RESUME_FROM
# continues it.
#
# Carry .debs (scripts/fetch_debs.sh) and a dragon built beforehand
# (BUILD=build-gpu), and for GPU_TESTS=1 its dragon_tests.
#
#   MODEL       the model (default models/little-dragon)
#   SPLITS      the splits, in order (default "test heldout_family heldout_shape")
#   LIMIT       each split's first N workloads (default 0: all)
#   WINDOW      seconds the whole script may take (default 520): the splits
#               take what the tests leave, in order, each all that is left
#               (SHARE=equal: an equal share each); a split cut short is kept
#   EVAL_ARGS   more flags for `dragon eval` (--labelled: the tasks the search
#               labelled alone, each timed beside its label; --refine: the
#               split's refinement examples as tasks, SPLIT.refine.*;
#               --write-first --judges N: every graph written first, the
#               writer alone on the GPU, then N judges side by side)
#   RESUME_FROM an eval.tgz brought back earlier (its tasks are kept)
#   SEARCH_DB=0 no comparison with the search (default: the committed
#               records merged into a database first, `--search-db`: each
#               correct output with a timed label against the search after
#               64, 256 and 1,000 trials and at the model's cost)
#   GPU_TESTS=1 first the tests of the GPU's writing, judging and measuring
#               (gpu_optimize, gpu_decode, search_cuda_measure_many,
#               gpu_measure_cuda_rounds, gpu_nn_sample, gpu_eval_: the
#               roofline and the re-measured median; at most 150 s)
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu_eval.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
t_script=$(date +%s)
cd "$(dirname "$0")/.." || exit 1
LOGDIR=$(mktemp -d /tmp/dragon-eval-logs.XXXXXX)
BUILD=${BUILD:-build-gpu}
MODEL=${MODEL:-models/little-dragon}
SPLITS=${SPLITS:-test heldout_family heldout_shape}
LIMIT=${LIMIT:-0}
WINDOW=${WINDOW:-520}
. scripts/log_steps.sh
. scripts/debs_env.sh
note "$DEBS_NOTE"
machine_log
[ -x "$BUILD/dragon" ] || build_logged "$BUILD/dragon"
DRAGON=./$BUILD/dragon
# The float64 references of large workloads run their outer loops on all cores.
export DRAGON_CFLAGS="-fopenmp"
trap 'cp "$LOGDIR/summary.txt" "$OUTDIR/"; tar czf "$OUTDIR/eval.tgz" -C "$LOGDIR" .; rm -rf "${SDB:-/nonexistent}"' EXIT

if [ -n "${RESUME_FROM:-}" ]; then
  tar xzf "$RESUME_FROM" -C "$LOGDIR" ./eval 2>/dev/null || tar xzf "$RESUME_FROM" -C "$LOGDIR" eval
  note "resumed: $(cat "$LOGDIR"/eval/*.tasks.jsonl 2>/dev/null | grep -c .) tasks judged before"
fi
if [ -n "${GPU_TESTS:-}" ]; then
  [ -x "$BUILD/dragon_tests" ] || build_logged "$BUILD/dragon_tests"
  DRAGON_BIN=$DRAGON timeout 150 "./$BUILD/dragon_tests" gpu_optimize gpu_decode search_cuda_measure_many \
    gpu_measure_cuda_rounds gpu_nn_sample gpu_eval_ >"$LOGDIR/gpu_tests.txt" 2>&1
  note "gpu tests: exit $?; $(tail -1 "$LOGDIR/gpu_tests.txt")"
fi

SEARCH_ARGS=""
if [ "${SEARCH_DB:-1}" != 0 ]; then
  t=$(date +%s)
  # beside the logs, not among them: the archive brings the logs back
  SDB=$(mktemp -d /tmp/dragon-search-db.XXXXXX)
  if "$DRAGON" db merge data/records --db "$SDB/db" >"$LOGDIR/search-db.txt" 2>&1; then
    SEARCH_ARGS="--search-db $SDB/db"
  fi
  note "search database: $(tail -1 "$LOGDIR/search-db.txt") ($(($(date +%s) - t)) s)"
fi

set -- $SPLITS
n=$#
for split in "$@"; do
  left=$((WINDOW - ($(date +%s) - t_script) - 15))
  # in order, each split the rest of the window (SHARE=equal: an equal share
  # of it): an evaluation resumes where it was cut, so one split finished
  # is worth more than three begun
  share=$left
  [ "${SHARE:-rest}" = equal ] && share=$((left / n))
  n=$((n - 1))
  if [ "$share" -lt 20 ]; then
    note "eval $split: not started ($left s left)"
    continue
  fi
  t=$(date +%s)
  # shellcheck disable=SC2086
  timeout -s INT -k 10 "$share" "$DRAGON" eval --split "$split" --limit "$LIMIT" --model "$MODEL" \
    --target cuda --resume --out "$LOGDIR/eval" $SEARCH_ARGS ${EVAL_ARGS:-} >"$LOGDIR/eval-$split.out" \
    2>"$LOGDIR/eval-$split.log"
  rc=$?
  note "eval $split: exit $rc in $(($(date +%s) - t)) s (of $share); $(cat "$LOGDIR/eval/$split".*tasks.jsonl 2>/dev/null | grep -c .) tasks judged; $(grep -m1 '^# ' "$LOGDIR/eval-$split.out")"
  grep '^|' "$LOGDIR/eval-$split.out" | tail -3
done
