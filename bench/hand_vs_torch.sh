#!/usr/bin/env bash
# hand_vs_torch.sh: dragon's hand-written schedules (schedules/*.json) against
# PyTorch eager and torch.compile on the 13 MetaSchedule workloads (config
# /0, fp32), measured in the same run on the GPU of this machine.
#
# For each workload: `dragon run X/0 --trace schedules/X.json --target cuda
# --repeat 50` (checked against the float64 reference, L2 flushed before each
# timed run, median), then bench/torch_eager.py (eager and torch.compile,
# L2 flushed, median). Every step's output goes to LOGDIR; a step that fails
# is reported and its cells print as FAIL or -, and the table is printed
# anyway (also to LOGDIR/table.txt). ratio = eager / dragon: above 1, the
# hand-written schedule is faster than PyTorch eager.
#
# Usage: bench/hand_vs_torch.sh LOGDIR     (from the repository root)
#   DRAGON   the binary (default ./dragon, else build/dragon)
#   PYTHON   the interpreter with torch (default python3)
#   REPEAT   timed runs per dragon workload (default 50)
#   WORKLOADS  the names to run (default all 13)
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 LOGDIR" >&2
  exit 2
fi
LOGDIR=$1
mkdir -p "$LOGDIR" || { echo "hand_vs_torch: cannot create $LOGDIR" >&2; exit 1; }
cd "$(dirname "$0")/.." || exit 1

DRAGON=${DRAGON:-}
if [ -z "$DRAGON" ]; then
  if [ -x ./dragon ]; then DRAGON=./dragon; else DRAGON=build/dragon; fi
fi
PYTHON=${PYTHON:-python3}
REPEAT=${REPEAT:-50}
WORKLOADS=${WORKLOADS:-"C1D C2D C3D CAP DEP DIL GMM GRP T2D NRM SFM CBR TBG"}

declare -A DRAGON_US EAGER_US COMPILE_US
failures=0

if [ ! -x "$DRAGON" ]; then
  echo "hand_vs_torch: no dragon binary at $DRAGON (build it, or set DRAGON)" >&2
  failures=$((failures + 1))
fi

for w in $WORKLOADS; do
  log="$LOGDIR/dragon_$w.log"
  DRAGON_US[$w]=FAIL
  if [ ! -x "$DRAGON" ]; then continue; fi
  if [ ! -f "schedules/$w.json" ]; then
    echo "hand_vs_torch: $w: schedules/$w.json is missing" | tee "$log" >&2
    failures=$((failures + 1))
    continue
  fi
  "$DRAGON" run "$w/0" --trace "schedules/$w.json" --target cuda --repeat "$REPEAT" >"$log" 2>&1
  rc=$?
  us=$(sed -n 's/^time *median \([0-9.]*\) us.*/\1/p' "$log" | head -n 1)
  if [ $rc -ne 0 ] || [ -z "$us" ]; then
    echo "hand_vs_torch: $w: dragon run failed (exit $rc): $(grep -v '^ *$' "$log" | tail -n 2 | tr '\n' ' ')" >&2
    failures=$((failures + 1))
    [ -n "$us" ] && DRAGON_US[$w]="$us(FAIL)"
    continue
  fi
  DRAGON_US[$w]=$us
  echo "hand_vs_torch: $w: dragon $us us" >&2
done

tlog="$LOGDIR/torch.log"
# shellcheck disable=SC2086
OUT="$LOGDIR" "$PYTHON" bench/torch_eager.py $WORKLOADS >"$LOGDIR/torch.txt" 2>"$tlog"
rc=$?
if [ $rc -ne 0 ]; then
  echo "hand_vs_torch: torch_eager.py failed (exit $rc): $(tail -n 3 "$tlog" | tr '\n' ' ')" >&2
  failures=$((failures + 1))
fi
while read -r name eager compiled; do
  [ -n "${name:-}" ] || continue
  EAGER_US[$name]=$eager
  COMPILE_US[$name]=$compiled
done <"$LOGDIR/torch.txt"

ratio() { # eager / dragon, or - when either is missing
  awk -v e="$1" -v d="$2" 'BEGIN {
    if (e ~ /^[0-9.]+$/ && d ~ /^[0-9.]+$/ && d > 0) printf "%.2f", e / d; else printf "-" }'
}

{
  echo "# dragon hand-written schedules vs PyTorch, fp32, $(date -u +%Y-%m-%dT%H:%MZ)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  fi
  printf "%-8s %12s %12s %12s %8s\n" workload "dragon us" "eager us" "compile us" ratio
  for w in $WORKLOADS; do
    d=${DRAGON_US[$w]:-FAIL}
    e=${EAGER_US[$w]:--}
    c=${COMPILE_US[$w]:--}
    printf "%-8s %12s %12s %12s %8s\n" "$w" "$d" "$e" "$c" "$(ratio "$e" "$d")"
  done
  echo "# ratio = eager / dragon (above 1: dragon faster); logs in $LOGDIR; $failures step(s) failed"
} | tee "$LOGDIR/table.txt"

[ $failures -eq 0 ]
