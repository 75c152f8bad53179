#!/usr/bin/env bash
# plan_ahead.sh [SECONDS] [MAX_MB]: on a machine without a GPU, before a
# labelling window, compile ahead the first round of the workloads the
# window will begin (`dragon data plan`), into build-gpu/plan, for
# scripts/gpu_label.sh to take (PLAN=build-gpu/plan, the folder carried to
# the GPU machine). Fits the cost model the window loads on the same
# records first (build-gpu/cost-model, unless it is there), so that both
# machines draw from one model. Stops after SECONDS (default 1800) or once
# the plan holds MAX_MB MiB (default 12: what a call carries beside the
# tree); rerun to add to it. SPLIT, LABEL_ARGS' --max-work (1e10) and
# the trial count (64) are the window's defaults. For several windows,
# plan more and split it into folders that a call carries each
# (scripts/plan_split.sh); a rerun here joins them again first.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_MAX=${1:-1800}
MAX_MB=${2:-12}
SPLIT=${SPLIT:-train}
DRAGON=${DRAGON:-./dragon}
base=${BASE_DB:-/tmp/dragon-plan-base}
if [ ! -f "$base/records.jsonl" ]; then
  rm -rf "$base"
  "$DRAGON" db merge data/records --db "$base" | tail -1
fi
mkdir -p build-gpu
if [ ! -f build-gpu/cost-model/data.bin ]; then
  "$DRAGON" db model --db "$base" --out build-gpu/cost-model
fi
# a plan split for several windows (scripts/plan_split.sh) is one again:
# a rerun skips the workloads it holds
for d in build-gpu/plan-[0-9]*; do
  [ -d "$d" ] || continue
  mkdir -p build-gpu/plan
  mv "$d"/plan-*.zst build-gpu/plan/ 2>/dev/null || true
  rmdir "$d" 2>/dev/null || true
done
# the plan's database is a copy: the search adds its workload lines there
rm -rf "$base-plan"
cp -a "$base" "$base-plan"
rm -f "$base-plan/writer.lock"
nice "$DRAGON" data plan --out build-gpu/plan --db "$base-plan" --split "$SPLIT" \
  --cost-model build-gpu/cost-model --budget-s "$SECONDS_MAX" --max-mb "$MAX_MB"
du -sh build-gpu/plan
