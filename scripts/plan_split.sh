#!/usr/bin/env bash
# plan_split.sh MAX_MB [DIR]: splits a plan compiled ahead (DIR, default
# build-gpu/plan) into folders a GPU call can each carry: the part files,
# in the order they were written (the split's order), stay in DIR up to
# MAX_MB MiB, and the ones after go to DIR-2 up to MAX_MB, then DIR-3 and
# so on. Each folder is a plan of its own for one labelling window
# (`PLAN=DIR-2 scripts/gpu_label.sh`, carrying DIR-2): a window begins
# where the windows before it stopped, and a workload it reaches that its
# plan does not hold is compiled there, as without a plan. Rerun to
# regroup after more parts are added (every DIR-N is merged back first).
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_MB=${1:?usage: scripts/plan_split.sh MAX_MB [DIR]}
DIR=${2:-build-gpu/plan}
[ -d "$DIR" ] || { echo "plan_split.sh: no plan at $DIR" >&2; exit 1; }
for d in "$DIR"-[0-9]*; do
  [ -d "$d" ] || continue
  mv "$d"/plan-*.zst "$DIR"/ 2>/dev/null || true
  rmdir "$d" 2>/dev/null || true
done
max=$((MAX_MB * 1024 * 1024))
n=1 used=0
# part names are plan-<date>-<n>.zst: name order is the order written
for f in $(ls "$DIR"/plan-*.zst | sort); do
  size=$(stat -c %s "$f")
  if [ $((used + size)) -gt "$max" ] && [ "$used" -gt 0 ]; then
    n=$((n + 1))
    used=0
  fi
  used=$((used + size))
  if [ "$n" -gt 1 ]; then
    mkdir -p "$DIR-$n"
    mv "$f" "$DIR-$n/"
  fi
done
for d in "$DIR" "$DIR"-[0-9]*; do
  [ -d "$d" ] && echo "$d: $(ls "$d" | wc -l) parts, $(du -sm "$d" | cut -f1) MiB"
done
