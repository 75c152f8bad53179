#!/usr/bin/env bash
# gpu.sh LOGDIR: what runs on the lent GPU machine, from the repository root.
#
# Builds dragon there (build-gpu/), with the libraries it lacks unpacked
# from the .debs carried in .debs/ (make the folder here with
# scripts/fetch_debs.sh and name .debs in the run's carry); runs the GPU tests (make test-gpu),
# the CUDA runtime's CPU tests, and the runtime benchmark; writes every log
# into LOGDIR and prints a short summary last.
#
# The machine has no network: nothing is installed, only unpacked under /tmp.
set -uo pipefail
LOGDIR=${1:?usage: scripts/gpu.sh LOGDIR}
mkdir -p "$LOGDIR"
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc)
summary="$LOGDIR/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

{
  date -u
  uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  command -v cc make nvcc
  nvcc --version 2>&1 | tail -1
} >"$LOGDIR/machine.txt" 2>&1

# Libraries the machine lacks (jansson, xgboost): the carried packages,
# unpacked under /tmp (scripts/fetch_debs.sh makes .debs/ here).
. scripts/debs_env.sh
note "libraries: $DEBS_NOTE"

t0=$(date +%s)
if make BUILD="$BUILD" -j"$JOBS" all "$BUILD/dragon_tests" bench >"$LOGDIR/build.log" 2>&1; then
  note "build: ok in $(($(date +%s) - t0)) s"
else
  note "build: FAILED (tail of build.log follows)"
  tail -30 "$LOGDIR/build.log"
  exit 1
fi

run_logged() { # name command...
  local name=$1
  shift
  local t=$(date +%s)
  timeout 300 "$@" >"$LOGDIR/$name.log" 2>&1
  local rc=$?
  note "$name: exit $rc in $(($(date +%s) - t)) s; $(tail -1 "$LOGDIR/$name.log")"
}

run_logged test-gpu make BUILD="$BUILD" test-gpu
run_logged test-cuda env DRAGON_BIN="$BUILD/dragon" "./$BUILD/dragon_tests" cuda_
# shellcheck disable=SC2086
run_logged bench "./$BUILD/bench_runtime" ${BENCH_ARGS:---variants 192}

echo
echo "==== test-gpu"
grep -E '^(ok|FAIL)|note|job|median|passed' "$LOGDIR/test-gpu.log"
echo "==== bench"
cat "$LOGDIR/bench.log"
echo "==== summary"
cat "$summary"
