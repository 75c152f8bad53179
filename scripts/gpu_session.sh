#!/usr/bin/env bash
# gpu_session.sh LOGDIR: one full pass on the lent GPU machine, from the
# repository root, within one command's time limit: the runtime's GPU tests
# and benchmark (scripts/gpu.sh, which builds), the hand-written schedules
# against PyTorch eager and torch.compile (bench/hand_vs_torch.sh), the
# tensor-core f16 GEMM against cuBLAS (bench/gemm_f16_vs_cublas.sh), and the
# CUDA model's tests and throughput (scripts/gpu_model.sh) when there is time.
# Carry .debs (scripts/fetch_debs.sh). The key results go to stdout; every
# log ends up in one archive, LOGDIR/logs.tgz.
set -u
OUTDIR=${1:?usage: scripts/gpu_session.sh LOGDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGDIR=/tmp/dragon-session-logs
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"
cd "$(dirname "$0")/.." || exit 1
trap 'tar czf "$OUTDIR/logs.tgz" -C "$LOGDIR" . 2>/dev/null' EXIT
export BUILD=${BUILD:-build-gpu}
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s]"; }

BENCH_ARGS=${BENCH_ARGS:---variants 48} timeout 200 scripts/gpu.sh "$LOGDIR/runtime" >"$LOGDIR/runtime.out" 2>&1
echo "$(el) runtime: exit $?"; cat "$LOGDIR/runtime/summary.txt" 2>/dev/null
# the libraries gpu.sh unpacked, for the binaries below
lib=/tmp/dragon-debs/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
if [ -x "$BUILD/dragon" ]; then
  DRAGON="$BUILD/dragon" REPEAT=30 timeout 220 bench/hand_vs_torch.sh "$LOGDIR/hand" >"$LOGDIR/hand.out" 2>&1
  echo "$(el) hand vs torch: exit $?"; cat "$LOGDIR/hand/table.txt" 2>/dev/null || tail -20 "$LOGDIR/hand.out"
  DRAGON="$BUILD/dragon" timeout 150 bench/gemm_f16_vs_cublas.sh "$LOGDIR/gemm" >"$LOGDIR/gemm.out" 2>&1
  echo "$(el) gemm f16: exit $?"; cat "$LOGDIR/gemm.out"
fi
left=$((560 - ($(date +%s) - t0)))
if [ -x scripts/gpu_model.sh ] && [ "$left" -gt 60 ]; then
  timeout "$left" scripts/gpu_model.sh "$LOGDIR/model" >"$LOGDIR/model.out" 2>&1
  echo "$(el) model: exit $?"; cat "$LOGDIR/model/summary.txt" 2>/dev/null || tail -20 "$LOGDIR/model.out"
else
  echo "$(el) model: skipped ($left s left)"
fi
