#!/usr/bin/env bash
# gpu_model.sh LOGDIR: the CUDA model on the lent GPU machine, from the
# repository root (nvidia-h200 or, for the two-GPU check, nvidia-h200-x2).
#
# Builds dragon's tests and bench/train_bench there (BUILD, default
# build-gpu), with libraries the machine lacks (jansson, xgboost) unpacked
# from the .deb files carried in .debs/ (see scripts/gpu.sh); finds an NCCL
# for the ranks (PyTorch's, unless DRAGON_NCCL_LIB is set); then runs
#   1. the gpu_nn_ tests: the CUDA model against the C reference (logits,
#      loss, every gradient, 10 AdamW steps), determinism, checkpoints;
#   2. the two-GPU check (train_bench --dp-check) where there are 2 GPUs;
#   3. the throughput bench (19m and 88m at the anchor's batch sizes, on
#      one GPU and, where there are two, on two) and, in the same run, the
#      PyTorch + torch.compile anchor (bench/torch_llama_train.py, one GPU);
#   4. the generation bench (bench/sample_bench: 64 prompts of 1000 tokens
#      generating 500, KV cache on the GPU);
# writing every log into LOGDIR and a summary last (LOGDIR/summary.txt).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as the machines ask.
# NGPU=1 (with CUDA_VISIBLE_DEVICES) keeps to one GPU, so another job can
# use the other.
#
# Nothing is installed: the machine has no network.
set -uo pipefail
LOGDIR=${1:?usage: scripts/gpu_model.sh LOGDIR}
mkdir -p "$LOGDIR"
BUILD=${BUILD:-build-gpu}
. scripts/log_steps.sh

NGPU=${NGPU:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)}
{
  date -u
  uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  nvidia-smi topo -m 2>&1
  command -v cc make nvcc python3
  nvcc --version 2>&1 | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), "GPUs")' 2>&1
} >"$LOGDIR/machine.txt" 2>&1
note "GPUs: $NGPU"

# Libraries the build needs and the machine lacks, from carried packages.
. scripts/debs_env.sh
note "$DEBS_NOTE"

# NCCL for the ranks (PyTorch's)
. scripts/nccl_env.sh
note "$NCCL_NOTE"

build_logged "$BUILD/dragon" "$BUILD/dragon_tests" "$BUILD/train_bench" "$BUILD/sample_bench"

run_logged test-gpu-nn ${NN_TEST_LIMIT:-300} env DRAGON_BIN="$BUILD/dragon" "./$BUILD/dragon_tests" gpu_nn_
run_logged test-nn-cuda 60 env DRAGON_BIN="$BUILD/dragon" "./$BUILD/dragon_tests" nn_cuda_
if [ "$NGPU" -ge 2 ]; then
  run_logged dp-check 300 "./$BUILD/train_bench" --dp-check --timeout 280
  GPUS=1,2
else
  note "dp-check: not run (one GPU)"
  GPUS=1
fi
# shellcheck disable=SC2086
run_logged train-bench 400 "./$BUILD/train_bench" --gpus "$GPUS" ${BENCH_ARGS:-}
run_logged torch-anchor ${ANCHOR_LIMIT:-400} env OUT="$LOGDIR" PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 \
  python3 bench/torch_llama_train.py
# Generation: 64 prompts of 1000 tokens, 500 new tokens each, on one GPU.
run_logged sample-bench ${SAMPLE_LIMIT:-150} env CUDA_VISIBLE_DEVICES=0 "./$BUILD/sample_bench"

# Side by side: tokens/s of dragon (one GPU) over the PyTorch anchor.
python3 - "$LOGDIR" >"$LOGDIR/compare.txt" 2>&1 <<'EOF'
import json, os, sys
d = sys.argv[1]
names = {"25M": "19m", "125M": "88m"}
torch = {}
try:
    for r in json.load(open(os.path.join(d, "torch_llama_train.json"))):
        torch[names.get(r["model"], r["model"])] = r
except Exception as e:
    print("no anchor results:", e)
print("%-6s %4s %14s %14s %8s %9s %9s" % ("config", "gpus", "dragon tok/s", "torch tok/s",
      "ratio", "dragon MFU", "torch MFU"))
for line in open(os.path.join(d, "train-bench.log")):
    f = line.split()
    if len(f) == 9 and f[0] in ("19m", "88m"):
        cfg, gpus, toks, mfu = f[0], int(f[1]), float(f[5]), f[7]
        t = torch.get(cfg)
        if t:
            ref = t["tokens_per_s"] * gpus  # the anchor runs on one GPU: ideal scaling
            print("%-6s %4d %14.0f %14.0f %8.2f %9s %8.1f%%" % (cfg, gpus, toks, ref, toks / ref, mfu,
                  100 * t["mfu_vs_680"]))
        else:
            print("%-6s %4d %14.0f %14s" % (cfg, gpus, toks, "-"))
EOF

echo
echo "==== gpu_nn tests"
grep -E '^(ok|FAIL)|note|worst|loss|train|passed' "$LOGDIR/test-gpu-nn.log" | head -120
[ -f "$LOGDIR/dp-check.log" ] && { echo "==== dp-check"; cat "$LOGDIR/dp-check.log"; }
echo "==== train_bench"
cat "$LOGDIR/train-bench.log"
echo "==== torch anchor"
cat "$LOGDIR/torch-anchor.log" | grep -v Warning | tail -5
echo "==== sample_bench"
cat "$LOGDIR/sample-bench.log"
echo "==== side by side (torch on one GPU; its 2-GPU figure is ideal scaling)"
cat "$LOGDIR/compare.txt"
echo "==== summary"
cat "$summary"
