# log_steps.sh: sourced by the GPU scripts after they set LOGDIR. Defines
#   note TEXT...                 prints a line and appends it to LOGDIR/summary.txt
#   build_logged TARGET...       make BUILD=$BUILD those targets into LOGDIR/build.log;
#                                on failure prints its tail and exits 1
#   run_logged NAME LIMIT CMD... runs CMD under a time limit into LOGDIR/NAME.log
#                                and notes its exit status, time and last line
#   machine_log [cpu]            the date, the GPUs (not with cpu) and the cores
#                                into LOGDIR/machine.txt
summary="$LOGDIR/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
build_logged() {
  local t0=$(date +%s)
  if make BUILD="$BUILD" -j"$(nproc)" "$@" >"$LOGDIR/build.log" 2>&1; then
    note "build: ok in $(($(date +%s) - t0)) s ($(grep -c 'nvcc' "$LOGDIR/build.log") nvcc runs)"
  else
    note "build: FAILED (tail of build.log follows)"
    tail -30 "$LOGDIR/build.log"
    exit 1
  fi
}
run_logged() {
  local name=$1 limit=$2
  shift 2
  local t=$(date +%s)
  timeout "$limit" "$@" >"$LOGDIR/$name.log" 2>&1
  local rc=$?
  note "$name: exit $rc in $(($(date +%s) - t)) s; $(tail -1 "$LOGDIR/$name.log")"
}
machine_log() {
  {
    date -u
    [ "${1:-}" = cpu ] || nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    nproc
  } >"$LOGDIR/machine.txt" 2>&1
}
