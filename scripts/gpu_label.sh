#!/usr/bin/env bash
# gpu_label.sh OUTDIR: one labelling window on the GPU machine (from the
# repository root): `dragon data label` over a split, resuming from every
# shard committed under data/records/, until BUDGET seconds are spent; then
# the records and baselines this window measured are packed into one new
# shard, OUTDIR/records-<date>-<split>.jsonl.zst, to be committed under
# data/records/. Nothing measured is left only on the machine: the pack
# runs whatever the labelling's exit status, and each record was appended
# to the working database as it was measured.
#
# Carry .debs (scripts/fetch_debs.sh) and, to spend no GPU time building,
# a dragon built beforehand (BUILD=build-gpu: `make BUILD=build-gpu
# build-gpu/dragon` on any machine with the same packages; the binary runs
# here), stripped and packed (`gzip -9 -k build-gpu/dragon`, carry
# build-gpu/dragon.gz: scripts/debs_env.sh unpacks it). Without one it is
# built here with every core. A labelling window reads data/records and
# data/splits.tsv.zst of the tree, not the model, the examples or the
# runs' logs: what a call carries is 64 MiB in all, so for a plan of a
# whole window leave those out of the tree for the call.
#
#   BUDGET    seconds of labelling (default 400)
#   WINDOW    seconds the whole script may take (the call's limit less the
#             machine's start): the labelling gets what is left of it
#             after the gates, the cost model and the base database, less
#             15 s for the rounds that end past the budget (within a
#             compile of it) and PACK_S (default 30) for the pack (5-6 s
#             in the windows of 2026-12-06); overrides BUDGET
#   SPLIT     the split to label (default train)
#   PER_GPU   labelling processes per GPU (default 8): they share the GPU
#             (its workers take turns, one measurement at a time) and the
#             cores, so that one compiles while another measures (a
#             round waits for its slowest compile: one process kept 5 of
#             16 cores compiling, three kept 6, bench/RESULTS.md)
#   THREADS   compiling threads a process (default: 1.5 x the cores over SHARDS;
#             more keeps the cores busy while rounds wait for their
#             slowest compile: the compiler processes run at a lower
#             priority than the GPU workers)
#   COST_MODEL a cost model fitted on the committed records (`dragon db
#             model --db DB --out DIR` on any machine, DIR carried): every
#             process starts from it; without one it is fitted here first
#   SHARDS    labelling processes (default: PER_GPU on every GPU), process
#             g on GPU g % GPUs and shard g/SHARDS of the split
#   LABEL_ARGS  flags for `dragon data label` (default "--trials-max 64
#             --max-work 1e10": 64 measured candidates a workload, the policy
#             bench/RESULTS.md's label-quality curve and trial costs chose for
#             the train split; references above 1e10 operations deferred)
#   PLAN      a plan compiled ahead on a machine without a GPU (`dragon data
#             plan --out DIR`, DIR carried): the workloads it holds take
#             its compilations and measure its candidates as their first
#             round (scripts/plan_ahead.sh makes one)
#   DG_COMMIT the commit being run, where the tree has no git (recorded in
#             every record by a binary built here)
#   GPU_TESTS=1 first run the gpu_ tests ($BUILD/dragon_tests, carried or
#             built; at most 240 s) into OUTDIR/gpu_tests.txt: the GPU paths
#             checked against the CPU before any budget goes into labels
#   SCALING=1 first measure how NVRTC scales here (bench/nvrtc_scaling.sh on
#             committed candidates; needs $BUILD/bench_nvrtc, carried or
#             built), into OUTDIR/nvrtc_scaling.txt: SCALING_N candidates
#             (default 8) within SCALING_S seconds (default 150)
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu_label.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
t_script=$(date +%s)
cd "$(dirname "$0")/.." || exit 1
# OUTDIR receives few files (what comes back from a GPU machine is counted):
# the record shards, summary.txt, gpu_tests.txt, nvrtc_scaling.txt and one
# archive of the logs, which are written elsewhere meanwhile.
LOGDIR=$(mktemp -d /tmp/dragon-label-logs.XXXXXX)
BUILD=${BUILD:-build-gpu}
BUDGET=${BUDGET:-400}
SPLIT=${SPLIT:-train}
LABEL_ARGS=${LABEL_ARGS---trials-max 64 --max-work 1e10}
. scripts/log_steps.sh
. scripts/debs_env.sh
note "$DEBS_NOTE"
machine_log
if [ ! -x "$BUILD/dragon" ]; then
  build_logged "$BUILD/dragon" ${DG_COMMIT:+DG_COMMIT=$DG_COMMIT}
fi
DRAGON=./$BUILD/dragon
note "dragon: $("$DRAGON" data label --help >/dev/null 2>&1 && echo ok || echo 'cannot run')"
# The float64 references of large workloads run their outer loops on all cores.
export DRAGON_CFLAGS="-fopenmp"

if [ -n "${GPU_TESTS:-}" ]; then
  [ -x "$BUILD/dragon_tests" ] || build_logged "$BUILD/dragon_tests" ${DG_COMMIT:+DG_COMMIT=$DG_COMMIT}
  DRAGON_BIN=$DRAGON timeout 240 "./$BUILD/dragon_tests" gpu_ >"$LOGDIR/gpu_tests.txt" 2>&1
  note "gpu tests: exit $?; $(tail -1 "$LOGDIR/gpu_tests.txt")"
  cp "$LOGDIR/gpu_tests.txt" "$OUTDIR/"
fi

if [ -n "${SCALING:-}" ]; then
  [ -x "$BUILD/bench_nvrtc" ] || build_logged "$BUILD/bench_nvrtc" ${DG_COMMIT:+DG_COMMIT=$DG_COMMIT}
  BUILD=$BUILD timeout "${SCALING_S:-150}" bench/nvrtc_scaling.sh "$LOGDIR" "" "${SCALING_N:-8}" \
    >"$LOGDIR/scaling.log" 2>&1
  cp "$LOGDIR/nvrtc_scaling.txt" "$OUTDIR/" 2>/dev/null
  note "nvrtc scaling: exit $?; $(tail -6 "$LOGDIR/scaling.log" | tr '\n' ';')"
fi

# The measuring road must work before any budget goes into labelling: a
# hand schedule and the untuned baseline, run and checked on the GPU.
run_logged gate_hand 60 "$DRAGON" run GMM/0 --trace schedules/GMM.json --target cuda --repeat 5
run_logged gate_baseline 60 "$DRAGON" run GMM/0 --target cuda --repeat 5
if ! grep -q "^check *pass" "$LOGDIR/gate_hand.log" || ! grep -q "^check *pass" "$LOGDIR/gate_baseline.log"; then
  note "gate FAILED: no labelling (gate logs follow)"
  tail -5 "$LOGDIR"/gate_*.log
  exit 1
fi
# A software-pipelined sample (multi-buffered shared memory, cp.async): if
# the pipelined kernels do not run and check here, label without them.
"$DRAGON" sample GMM/0 --count 40 --seed 3 2>/dev/null | grep software_pipeline_async | head -1 \
  >"$LOGDIR/gate_pipelined.json"
run_logged gate_pipelined 60 "$DRAGON" run GMM/0 --trace "$LOGDIR/gate_pipelined.json" \
  --target cuda --repeat 5
if ! grep -q "^check *pass" "$LOGDIR/gate_pipelined.log"; then
  note "gate: the pipelined sample FAILED; labelling without pipeline sketches"
  tail -5 "$LOGDIR/gate_pipelined.log"
  LABEL_ARGS="${LABEL_ARGS:-} --no-pipeline"
fi
# The same for the pipelined tensor-core sketches (register stage, nested
# fragment pipeline), on an f16 GEMM.
TC_SPEC="gemm:m=1024,n=1024,k=1024,trans_a=0,trans_b=0,dtype=f16"
"$DRAGON" sample "$TC_SPEC" --count 40 --seed 9 2>/dev/null |
  grep manifest_shared_memory_local_stage | head -1 >"$LOGDIR/gate_tc_pipelined.json"
run_logged gate_tc_pipelined 60 "$DRAGON" run "$TC_SPEC" --trace "$LOGDIR/gate_tc_pipelined.json" \
  --target cuda --repeat 5
if ! grep -q "^check *pass" "$LOGDIR/gate_tc_pipelined.log"; then
  note "gate: the pipelined tensor-core sample FAILED; labelling without pipeline sketches"
  tail -5 "$LOGDIR/gate_tc_pipelined.log"
  case "${LABEL_ARGS:-}" in *--no-pipeline*) ;; *) LABEL_ARGS="${LABEL_ARGS:-} --no-pipeline" ;; esac
fi

mkdir -p data/records
# The committed records are merged once into a base database, which every
# process starts from as a copy (its resume: the workloads it holds are
# labelled already). The database's files are append-only, so what a
# process measured is what its files hold past the base's sizes: those
# tails are packed, and the committed shards are not read again (eight
# packs each reading every committed shard to leave them out ran past the
# window and its records were lost).
t0=$(date +%s)
rm -rf /tmp/label-base
run_logged base 120 "$DRAGON" db merge data/records --db /tmp/label-base
rm -f /tmp/label-base/writer.lock
note "base database: $(($(date +%s) - t0)) s"
# The cost model's warm start (features of the last 20,000 committed
# records, replayed) is done once, not by every process: eight processes
# each fitting their own spent 186-221 s of a 270 s window on it. A model
# fitted beforehand on the same records (`dragon db model`, carried as
# COST_MODEL) costs no GPU time at all.
if [ -z "${COST_MODEL:-}" ] || [ ! -f "$COST_MODEL/data.bin" ]; then
  COST_MODEL=/tmp/dragon-cost-model
  run_logged cost_model 300 "$DRAGON" db model --db /tmp/label-base --out "$COST_MODEL"
fi
if [ -f "$COST_MODEL/data.bin" ]; then
  note "cost model: $COST_MODEL"
  LABEL_ARGS="${LABEL_ARGS:-} --cost-model $COST_MODEL"
else
  note "cost model: none could be fitted; each process warm-starts its own"
fi
if [ -n "${PLAN:-}" ]; then
  if [ -d "$PLAN" ]; then
    note "plan: $PLAN ($(ls "$PLAN" | wc -l) files, $(du -sh "$PLAN" | cut -f1))"
    LABEL_ARGS="${LABEL_ARGS:-} --plan $PLAN"
  else
    note "plan: $PLAN is not here; labelling without one"
  fi
fi
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || { note "no GPU"; exit 1; }
SHARDS=${SHARDS:-$((NGPU * ${PER_GPU:-8}))}
THREADS=${THREADS:-$((3 * $(nproc) / (2 * SHARDS)))}
[ "$THREADS" -ge 1 ] || THREADS=1
if [ -n "${WINDOW:-}" ]; then
  # after the labelling: a round ends within a compile of the budget (no
  # candidate is built past it), a process past it is stopped 15 s later,
  # and the packing takes a few seconds (its reserve: PACK_S, default 30)
  BUDGET=$((WINDOW - ($(date +%s) - t_script) - 15 - ${PACK_S:-30}))
  note "budget: $BUDGET s of labelling left in a window of $WINDOW s"
  [ "$BUDGET" -ge 30 ] || { note "no time left to label"; SHARDS=0; }
fi
t0=$(date +%s)
for ((g = 0; g < SHARDS; g++)); do
  rm -rf "/tmp/label-db$g"
  cp -a /tmp/label-base "/tmp/label-db$g"
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$((g % NGPU)) timeout -s INT -k 10 $((BUDGET + 15)) "$DRAGON" data label \
    --db "/tmp/label-db$g" --split "$SPLIT" --shard "$g/$SHARDS" \
    --budget-s "$BUDGET" --target cuda --threads "$THREADS" ${LABEL_ARGS:-} \
    >"$LOGDIR/label$g.out" 2>"$LOGDIR/label$g.log" &
done
wait
note "labelling: $(($(date +%s) - t0)) s; $(cat "$LOGDIR"/label*.out | tr '\n' ' ')"
t0=$(date +%s)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
# Each process's new lines (its files past the base's sizes) become a
# database of their own, merged into one shard for OUTDIR (few files come
# back); where that fails, each process's database is packed on its own.
rm -rf /tmp/label-all
mkdir -p /tmp/label-all "$LOGDIR/shards"
for ((g = 0; g < SHARDS; g++)); do
  for f in workloads.jsonl records.jsonl baselines.jsonl exhausted.jsonl; do
    [ -f "/tmp/label-db$g/$f" ] || continue
    base=$(stat -c %s "/tmp/label-base/$f" 2>/dev/null || echo 0)
    tail -c +$((base + 1)) "/tmp/label-db$g/$f" >>"/tmp/label-all/$f"
  done
done
if "$DRAGON" db pack --db /tmp/label-all --out "$OUTDIR/records-$stamp-$SPLIT.jsonl.zst" \
  >>"$LOGDIR/pack.log" 2>&1; then
  note "one shard ($(($(date +%s) - t0)) s): $(tail -1 "$LOGDIR/pack.log")"
else
  note "packing the new lines failed ($(tail -1 "$LOGDIR/pack.log")): one shard a process"
  for ((g = 0; g < SHARDS; g++)); do
    "$DRAGON" db pack --db "/tmp/label-db$g" --except data/records \
      --out "$OUTDIR/records-$stamp-$SPLIT-$g.jsonl.zst" >"$LOGDIR/pack$g.log" 2>&1 &
  done
  wait
fi
tail -n 3 "$LOGDIR"/label*.log
cp "$LOGDIR/summary.txt" "$OUTDIR/"
# the per-workload lines and every other log in one archive
tar czf "$OUTDIR/logs.tgz" -C "$LOGDIR" .
