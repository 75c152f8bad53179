#!/usr/bin/env bash
# gpu_attention.sh LOGDIR: the attention kernels alone on the lent GPU
# machine, from the repository root: builds the tests and
# bench/attention_bench there (BUILD, default build-gpu; libraries from the
# .deb files carried in .debs/, see scripts/gpu.sh), runs the attention
# tests (every kernel shape against the double reference) and the nn_cuda_
# argument checks, then times the shapes in TILES (attention_bench --tiles;
# default: the mma.sync defaults and the wgmma kernels with one and two
# warpgroups a block) at the 19m and 88m training shapes. Logs go to
# LOGDIR, a summary last. WITH_MODEL=1 also runs the gpu_nn_ model tests
# (the CUDA model against the C reference, SFT and sampling on the GPU).
set -uo pipefail
LOGDIR=${1:?usage: scripts/gpu_attention.sh LOGDIR}
mkdir -p "$LOGDIR"
BUILD=${BUILD:-build-gpu}
TILES=${TILES:-2/1/2,w1/1/1,w2/2/2,w2/1/1,w1/2/2,w2/2/1}
. scripts/log_steps.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv >"$LOGDIR/machine.txt" 2>&1
. scripts/debs_env.sh
note "$DEBS_NOTE"
. scripts/nccl_env.sh

build_logged "$BUILD/dragon" "$BUILD/dragon_tests" "$BUILD/attention_bench" "$BUILD/train_bench"
run_logged test-attention 240 "./$BUILD/dragon_tests" gpu_nn_attention
run_logged test-nn-cuda 60 "./$BUILD/dragon_tests" nn_cuda_
[ "${WITH_MODEL:-0}" = 1 ] &&
  run_logged test-gpu-nn 300 env DRAGON_BIN="$BUILD/dragon" "./$BUILD/dragon_tests" gpu_nn_
run_logged attention-bench 200 "./$BUILD/attention_bench" --tiles "$TILES" --reps "${REPS:-20}"
echo "==== attention tests"
grep -E '^(ok|FAIL)|--|warpgroup|m-tile|worst|FAIL|passed' "$LOGDIR/test-attention.log" | head -150
[ -f "$LOGDIR/test-gpu-nn.log" ] && { echo "==== gpu_nn tests"; grep -E '^(ok|FAIL)|passed' "$LOGDIR/test-gpu-nn.log"; }
echo "==== attention_bench"
cat "$LOGDIR/attention-bench.log"
echo "==== summary"
cat "$summary"
