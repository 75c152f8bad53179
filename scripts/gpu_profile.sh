#!/usr/bin/env bash
# gpu_profile.sh LOGDIR: where the CUDA model's training step spends its
# time, kernel by kernel, on the lent GPU machine (from the repository root).
#
# Builds bench/train_bench there (BUILD, default build-gpu; libraries from
# the .debs carried in .debs/, as scripts/gpu_model.sh does) and runs it
# under Nsight Compute with one metric (gpu__time_duration) for a few steps
# of each config, then sums the kernels' times by name
# (LOGDIR/profile_<config>.txt). The PyTorch anchor's own breakdown comes
# from torch.profiler over the same configs (LOGDIR/torch_profile.txt).
# The bench's peak-rate matmul measurement is skipped (--peak-tflops), so
# only training steps are profiled.
#
# DETAIL="REGEX ..." (e.g. DETAIL="forward_kernel dq_kernel") adds, for the
# first launch of a kernel matching each, in the first config, Nsight
# Compute's speed-of-light, occupancy, warp-state, scheduler and source
# sections and the warp stall reasons (LOGDIR/detail_<config>.txt).
# TORCH=0 skips PyTorch's breakdown.
set -uo pipefail
LOGDIR=${1:?usage: scripts/gpu_profile.sh LOGDIR}
mkdir -p "$LOGDIR"
BUILD=${BUILD:-build-gpu}
CONFIGS=${CONFIGS:-19m 88m}
. scripts/nccl_env.sh # NVLink multicast off, NCCL for the ranks
. scripts/debs_env.sh
make BUILD="$BUILD" -j"$(nproc)" "$BUILD/train_bench" >"$LOGDIR/build.log" 2>&1 ||
  { tail -30 "$LOGDIR/build.log"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for cfg in $CONFIGS; do
  "$NCU" --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv \
    --log-file "$LOGDIR/ncu_$cfg.csv" "./$BUILD/train_bench" --configs "$cfg" --gpus 1 \
    --steps 2 --warmup 1 --peak-tflops 1000 >"$LOGDIR/ncu_$cfg.out" 2>&1
  python3 - "$LOGDIR/ncu_$cfg.csv" 3 >"$LOGDIR/profile_$cfg.txt" <<'PY'
import csv, sys, collections
path, steps = sys.argv[1], int(sys.argv[2])
rows = [l for l in open(path) if l.startswith('"')]
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "")
    us = v / 1000 if unit in ("nsecond", "ns") else v * 1000 if unit in ("msecond", "ms") else v
    name = r["Kernel Name"].split("(")[0][:90]
    tot[name] += us; cnt[name] += 1
all_us = sum(tot.values())
print("kernels by total time over %d steps (warm-up included); all %.1f ms, %.1f ms a step" %
      (steps, all_us / 1000, all_us / 1000 / steps))
for n, t in sorted(tot.items(), key=lambda x: -x[1]):
    print("%8.2f ms %5.1f%% %6d  %s" % (t / 1000, 100 * t / all_us, cnt[n], n))
PY
done
if [ -n "${DETAIL:-}" ]; then
  cfg=${CONFIGS%% *}
  : >"$LOGDIR/detail_$cfg.txt"
  # the warp stall reasons, cycles per issued instruction each
  stalls=""
  for r in barrier branch_resolving dispatch_stall drain lg_throttle long_scoreboard \
    math_pipe_throttle mio_throttle no_instruction not_selected selected short_scoreboard wait; do
    stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  for re in $DETAIL; do
    "$NCU" --target-processes all --kernel-name "regex:$re" --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section SourceCounters --metrics "${stalls#,}" \
      "./$BUILD/train_bench" --configs "$cfg" --gpus 1 --steps 1 --warmup 0 --peak-tflops 1000 \
      >>"$LOGDIR/detail_$cfg.txt" 2>&1
  done
fi
[ "${TORCH:-1}" = 0 ] || python3 - >"$LOGDIR/torch_profile.txt" 2>&1 <<'PY'
import torch, sys
sys.argv = ["x"]
src = open("bench/torch_llama_train.py").read().split("rows = []")[0]
exec(src)
from torch.profiler import profile, ProfilerActivity
for name, V, d, L, h, kv, ff, B, T in (("25M", 8192, 384, 8, 6, 2, 1024, 64, 1024), ("125M", 8192, 768, 12, 12, 4, 2048, 32, 1024)):
    m = LM(V, d, L, h, kv, ff, T).to(dev); opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True); cm = torch.compile(m)
    x = torch.randint(0, V, (B, T), device=dev); y = torch.randint(0, V, (B, T), device=dev)
    def step():
        with torch.autocast("cuda", torch.bfloat16): loss = cm(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    for _ in range(3): step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(2): step()
        torch.cuda.synchronize()
    print("====", name, "(2 steps)")
    ka = p.key_averages()
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            print(ka.table(sort_by=key, row_limit=30, max_name_column_width=80)); break
        except Exception as e:
            print("sort key", key, "failed:", e)
PY
for cfg in $CONFIGS; do head -40 "$LOGDIR/profile_$cfg.txt"; done
[ "${TORCH:-1}" = 0 ] || grep -A35 "====" "$LOGDIR/torch_profile.txt" | cut -c1-200 | head -80
