#!/usr/bin/env bash
# nvrtc_scaling.sh OUTDIR [SPEC_PREFIX] [N]: how NVRTC's throughput scales on
# this machine, on real candidates: the first N records (default 30) of the
# committed workload whose spec starts with SPEC_PREFIX (default the f16
# conv1d of the first labelling window, the slowest to compile) are emitted
# as CUDA (`dragon emit`), then compiled on 15 threads in one process, on 15
# threads each with an NVRTC worker process (as the tuner does), by 15
# processes of their own, one at a time, and on 4 and 8 threads.
# Prints the machine (cores, model, memory) and a line per mode;
# OUTDIR/nvrtc_scaling.txt keeps them.
set -uo pipefail
OUTDIR=${1:?usage: bench/nvrtc_scaling.sh OUTDIR [SPEC_PREFIX] [N]}
PREFIX=${2:-conv1d_nlc:n=32,l=1024,ci=32,co=320}
N=${3:-30}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.." || exit 1
. scripts/debs_env.sh
DRAGON=./$BUILD/dragon
BENCH=./$BUILD/bench_nvrtc
work=/tmp/dragon-nvrtc-scaling
rm -rf "$work"
mkdir -p "$work/src"
"$DRAGON" db merge data/records --db "$work/db" >/dev/null || exit 1
python3 - "$work" "$PREFIX" "$N" <<'PY'
import json, sys
work, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = {}
for line in open(work + "/db/workloads.jsonl"):
    j = json.loads(line)
    spec[j["workload"]] = j["spec"]
k = 0
with open(work + "/list.txt", "w") as out:
    for line in open(work + "/db/records.jsonl"):
        r = json.loads(line)
        s = spec.get(r["workload"], "")
        if not s.startswith(prefix) or k >= n:
            continue
        path = "%s/src/t%03d.json" % (work, k)
        open(path, "w").write(json.dumps(r["trace"]))
        out.write("%s\t%s\n" % (s, path))
        k += 1
PY
while IFS=$'\t' read -r spec trace; do
  "$DRAGON" emit "$spec" --trace "$trace" --target cuda >"${trace%.json}.cu" 2>/dev/null || rm -f "${trace%.json}.cu"
done <"$work/list.txt"
files=$(ls "$work"/src/*.cu)
{
  echo "machine: $(nproc) CPUs; $(lscpu | sed -n 's/^Model name: *//p'); $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
  echo "sources: $(echo "$files" | wc -l) of $PREFIX, $(cat $files | wc -c) bytes"
  # the comparison that matters first, in case the time runs out: 15
  # threads compiling in this process, and in 15 NVRTC worker processes
  # (as the tuner compiles), against 15 processes of their own
  DRAGON_NVRTC_PROCS=0 "$BENCH" --threads 15 $files
  DRAGON_NVRTC_PROCS=15 "$BENCH" --threads 15 $files | sed 's/$/ (NVRTC worker processes)/'
  "$BENCH" --procs 15 $files
  "$BENCH" $files | awk '/ s wall / {c += $2; w += $5; n++} END {printf "%d files one at a time: %.2f s wall (%.2f s cpu), %.2f files/s\n", n, w, c, n / w}'
  for t in 4 8; do DRAGON_NVRTC_PROCS=0 "$BENCH" --threads "$t" $files; done
} 2>&1 | tee "$OUTDIR/nvrtc_scaling.txt"
