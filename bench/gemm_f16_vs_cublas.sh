#!/usr/bin/env bash
# gemm_f16_vs_cublas.sh LOGDIR: the tensor-core hand schedule of the f16 GEMM
# (schedules/gemm_f16_4096.json, f16 inputs, f32 output) against cuBLAS
# through PyTorch (torch.matmul of f16 inputs, f16 output), measured in the
# same run, L2 flushed before each timed run.
# The schedule is first checked against the float64 reference at 1024^3
# (the same trace: its outer factors are inferred), then timed at 4096^3.
set -u
LOGDIR=${1:?usage: bench/gemm_f16_vs_cublas.sh LOGDIR}
mkdir -p "$LOGDIR"
cd "$(dirname "$0")/.." || exit 1
DRAGON=${DRAGON:-build/dragon}
PYTHON=${PYTHON:-python3}
S=schedules/gemm_f16_4096.json
timeout 240 "$DRAGON" run "gemm:m=1024,n=1024,k=1024,dtype=f16" --trace $S --target cuda --repeat 20 \
  >"$LOGDIR/gemm1024_check.log" 2>&1
echo "check 1024^3: exit $? $(grep -E 'check|result' "$LOGDIR/gemm1024_check.log" | tr '\n' ' ')"
timeout 120 "$DRAGON" run "gemm:m=4096,n=4096,k=4096,dtype=f16" --trace $S --target cuda --repeat 30 \
  --no-check >"$LOGDIR/gemm4096.log" 2>&1
echo "dragon 4096^3: exit $? $(grep -E 'time|result' "$LOGDIR/gemm4096.log" | tr '\n' ' ')"
timeout 120 "$PYTHON" - >"$LOGDIR/cublas.log" 2>&1 <<'PY'
import torch, statistics
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
n = 4096
a = torch.randn(n, n, device="cuda", dtype=torch.float16)
b = torch.randn(n, n, device="cuda", dtype=torch.float16)
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def bench(fn, reps=30):
    for _ in range(3): fn()
    ts = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    return statistics.median(ts), ts[0], ts[-1]
for name, fn in [("cublas f16 (torch.matmul)", lambda: a @ b)]:
    try:
        med, lo, hi = bench(fn)
        print(f"{name}: median {med:.1f} us  min {lo:.1f}  max {hi:.1f}  {2*n**3/med/1e6:.0f} TFLOP/s")
    except Exception as ex:
        print(f"{name}: failed: {ex}")
PY
echo "torch: $(cat "$LOGDIR/cublas.log" | tr '\n' ' ')"
