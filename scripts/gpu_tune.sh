#!/usr/bin/env bash
# gpu_tune.sh LOGDIR: tunes the 13 MetaSchedule workloads (config /0, f32)
# and the f16 GEMM 4096^3 with `dragon tune --target cuda` on every GPU of
# this machine, and measures PyTorch eager, torch.compile and cuBLAS in the
# same run (from the repository root, on the lent GPU machine).
#
# The workloads are dealt over the GPUs (one tuning process per GPU, each
# with its own database LOGDIR/db<g>); each workload gets an equal share of
# what is left of its GPU's BUDGET seconds, at most TRIALS trials, and is
# stopped at its share (the database keeps every record measured before the
# stop). The last GPU first measures the PyTorch anchors
# (bench/torch_eager.py, and cuBLAS through torch.matmul for the GEMM).
# Then each workload's best trace is measured again with `dragon run
# --repeat 50` (checked against the float64 reference; the GEMM unchecked
# there, its candidates were checked while tuning). Logs, the databases
# (LOGDIR/db.tar.zst) and LOGDIR/summary.txt come back; bench/tune_report.py
# makes the table from them. A database already in LOGDIR/db<g> is resumed.
#
#   TRIALS  trials per workload (default 1000)
#   BUDGET  seconds of tuning per GPU (default 330)
#   WORKLOADS  names (default the 13 and GEMM16)
#   WEIGHTS    shares of the budget, e.g. "GEMM16=4 C3D=2" (default 1 each)
#   GPUS       device ids to use, e.g. "1" (default every GPU): two runs
#              with disjoint GPUS and LOGDIRs can share one machine
#   THREADS    search threads per tuning process (default: cores / GPUs)
#   RERUN_ONLY=1  no tuning: measure the best traces already in LOGDIR/db<g>
#              again beside PyTorch (the table's rerun column)
set -uo pipefail
LOGDIR=${1:?usage: scripts/gpu_tune.sh LOGDIR}
mkdir -p "$LOGDIR"
BUILD=${BUILD:-build-gpu}
TRIALS=${TRIALS:-1000}
BUDGET=${BUDGET:-330}
WORKLOADS=${WORKLOADS:-"GEMM16 C2D C3D DIL CBR GRP DEP C1D T2D CAP GMM TBG NRM SFM"}
. scripts/nccl_env.sh # NVLink multicast off, NCCL for the ranks
. scripts/log_steps.sh
# A workload's weight in its GPU's budget: WEIGHTS="GEMM16=4 C3D=2" (default 1).
weight_of() {
  local kv
  for kv in ${WEIGHTS:-}; do [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }; done
  echo 1
}
spec_of() { if [ "$1" = GEMM16 ]; then echo "gemm:m=4096,n=4096,k=4096,dtype=f16"; else echo "$1/0"; fi; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nproc
} >"$LOGDIR/machine.txt" 2>&1
. scripts/debs_env.sh
t0=$(date +%s)
make BUILD="$BUILD" -j"$(nproc)" "$BUILD/dragon" >"$LOGDIR/build.log" 2>&1 ||
  { note "build FAILED"; tail -30 "$LOGDIR/build.log"; exit 1; }
note "build: $(($(date +%s) - t0)) s"
DRAGON=./$BUILD/dragon
# The float64 references of large workloads run their outer loops on all cores.
export DRAGON_CFLAGS="-fopenmp"

for w in $WORKLOADS; do echo "$w $("$DRAGON" workloads --canonical "$(spec_of "$w")")"; done \
  >"$LOGDIR/names.txt"

NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || { note "no GPU"; exit 1; }
# the cores are shared by every GPU of the machine, also another run's
THREADS=${THREADS:-$(($(nproc) / NGPU))}
read -r -a GPU_IDS <<<"${GPUS:-$(seq -s ' ' 0 $((NGPU - 1)))}"
NGPU=${#GPU_IDS[@]}
note "GPUs: $NGPU; tuning budget $BUDGET s per GPU, at most $TRIALS trials per workload"
declare -a SHARD
i=0
for w in $WORKLOADS; do
  g=$((i % NGPU))
  SHARD[$g]="${SHARD[$g]:-} $w"
  i=$((i + 1))
done

anchors() { # gpu
  local names
  names=$(echo "$WORKLOADS" | tr ' ' '\n' | grep -v '^GEMM16$' | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -n "${names// /}" ] && CUDA_VISIBLE_DEVICES=${GPU_IDS[$1]} OUT="$LOGDIR" PYTHONUNBUFFERED=1 timeout 300 \
    python3 bench/torch_eager.py $names >"$LOGDIR/torch.txt" 2>"$LOGDIR/torch.log"
  case " $WORKLOADS " in *" GEMM16 "*) ;; *) return ;; esac
  CUDA_VISIBLE_DEVICES=${GPU_IDS[$1]} timeout 120 python3 - >"$LOGDIR/cublas.txt" 2>&1 <<'PY'
import torch, statistics
n = 4096
a = torch.randn(n, n, device="cuda", dtype=torch.float16)
b = torch.randn(n, n, device="cuda", dtype=torch.float16)
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for _ in range(3): a @ b
ts = []
for _ in range(50):
    flush.zero_()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); a @ b; e.record(); torch.cuda.synchronize()
    ts.append(s.elapsed_time(e) * 1e3)
ts.sort()
print("GEMM16 cublas_us %.3f min %.3f max %.3f" % (statistics.median(ts), ts[0], ts[-1]))
PY
}

shard() { # gpu
  local g=$1 start deadline left n per w spec
  local ws=(${SHARD[$g]})
  [ "$g" -eq $((NGPU - 1)) ] && anchors "$g"
  start=$(date +%s)
  deadline=$((t_tune + BUDGET))
  local wsum=0
  for w in "${ws[@]}"; do wsum=$((wsum + $(weight_of "$w"))); done
  for w in "${ws[@]}"; do
    [ -n "${RERUN_ONLY:-}" ] && break
    left=$((deadline - $(date +%s)))
    per=$((left * $(weight_of "$w") / wsum))
    [ $per -lt 15 ] && per=15
    spec=$(spec_of "$w")
    local t=$(date +%s)
    # the tensor-core space's samples are costly to lower: a smaller population
    local pop=512
    [ "$w" = GEMM16 ] && pop=${GEMM_POPULATION:-128}
    CUDA_VISIBLE_DEVICES=${GPU_IDS[$g]} timeout -s INT -k 10 $per "$DRAGON" tune "$spec" --trials "$TRIALS" \
      --db "$LOGDIR/db$g" --target cuda --threads "$THREADS" --population $pop \
      >"$LOGDIR/tune_$w.log" 2>&1
    echo "$w gpu ${GPU_IDS[$g]} rc $? wall $(($(date +%s) - t)) s (share $per s)" >>"$LOGDIR/tune_walls.txt"
    wsum=$((wsum - $(weight_of "$w")))
  done
  for w in "${ws[@]}"; do
    spec=$(spec_of "$w")
    # the header line (workload, latency, record count) apart from the trace
    "$DRAGON" db best "$spec" --db "$LOGDIR/db$g" >"$LOGDIR/best_$w.out" 2>&1 || continue
    grep -v '^\[' "$LOGDIR/best_$w.out" >"$LOGDIR/best_$w.txt"
    grep '^\[' "$LOGDIR/best_$w.out" >"$LOGDIR/best_$w.json"
    local check=""
    [ "$w" = GEMM16 ] && check="--no-check"
    CUDA_VISIBLE_DEVICES=${GPU_IDS[$g]} timeout 120 "$DRAGON" run "$spec" --trace "$LOGDIR/best_$w.json" \
      --target cuda --repeat 50 $check >"$LOGDIR/rerun_$w.log" 2>&1
  done
}

# The measuring pipeline must work before any budget goes into tuning.
if [ -z "${SKIP_GATE:-}" ]; then
  make BUILD="$BUILD" -j"$(nproc)" "$BUILD/dragon_tests" >>"$LOGDIR/build.log" 2>&1
  if ! DRAGON_BIN="$DRAGON" timeout 120 "./$BUILD/dragon_tests" gpu_measure >"$LOGDIR/gate.log" 2>&1; then
    note "gate: gpu_measure FAILED, no tuning (tail of gate.log follows)"
    tail -20 "$LOGDIR/gate.log"
    exit 1
  fi
  note "gate: gpu_measure passed"
fi
t_tune=$(date +%s)
for ((g = 0; g < NGPU; g++)); do shard "$g" & done
wait
note "tuning and re-measuring: $(($(date +%s) - t_tune)) s"
tar -C "$LOGDIR" -cf - $(cd "$LOGDIR" && ls -d db*/) | zstd -q -19 -T0 -o "$LOGDIR/db.tar.zst" 2>/dev/null ||
  tar -C "$LOGDIR" -czf "$LOGDIR/db.tar.gz" $(cd "$LOGDIR" && ls -d db*/)
tar -C "$LOGDIR" -czf "$LOGDIR/logs.tgz" --exclude='db*' .
cat "$LOGDIR/tune_walls.txt"
for w in $WORKLOADS; do
  echo "$w: $(tail -1 "$LOGDIR/tune_$w.log" 2>/dev/null | cut -c1-160) | $(grep -E '^(time|check)' "$LOGDIR/rerun_$w.log" 2>/dev/null | tr '\n' ' ' | cut -c1-120)"
done
cat "$LOGDIR/torch.txt" "$LOGDIR/cublas.txt"
cat "$summary"
