#!/usr/bin/env bash
# Runs libFuzzer targets for a set time each, one after the other (the CI machine has 2 cores).
#
#   fuzz/run.sh BUILD_DIR SECONDS TARGET...     (make fuzz / make fuzz-brief)
#
# Each target runs BUILD_DIR/fuzz/fuzz_<target> over its working corpus BUILD_DIR/corpus/<target>
# (new inputs go there) and the checked-in seeds fuzz/corpus/<target>, with fuzz/<target>.dict
# when there is one. A crash, a sanitizer report, a leak, an input slower than 30 s or a process
# past 2 GB stops that target: its input is kept in BUILD_DIR/artifacts/<target>/, the end of
# its log is printed, the other targets still run and the script exits 1. Logs:
# BUILD_DIR/logs/<target>.log; one summary line per target (executions, coverage, corpus).
# Environment: FUZZ_SEED (see below).
set -uo pipefail
cd "$(dirname "$0")/.."

if (($# < 3)); then
  echo "usage: fuzz/run.sh BUILD_DIR SECONDS TARGET..." >&2
  exit 2
fi
# Absolute paths: the cli target works in a sandbox directory of its own.
build=$(realpath -m "$1")
seconds=$2
shift 2

status=0
for target in "$@"; do
  binary=$build/fuzz/fuzz_$target
  corpus=$build/corpus/$target
  artifacts=$build/artifacts/$target
  log=$build/logs/$target.log
  mkdir -p "$corpus" "$artifacts" "$build/logs"
  options=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
           -artifact_prefix="$artifacts/")
  if [[ -f fuzz/$target.dict ]]; then options+=(-dict="$PWD/fuzz/$target.dict"); fi
  # FUZZ_SEED fixes libFuzzer's random seed (make fuzz-brief: the same mutations on every CI run,
  # so that CI checks what local runs checked instead of gambling on new inputs); unset or 0,
  # libFuzzer draws one (make fuzz: the long runs explore).
  if [[ -n ${FUZZ_SEED:-} && ${FUZZ_SEED} != 0 ]]; then options+=(-seed="$FUZZ_SEED"); fi
  if "$binary" "${options[@]}" "$corpus" "$PWD/fuzz/corpus/$target" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
    cov=$(sed -E -n 's/.* cov: ([0-9]+).*/\1/p' <<<"$done_line")
    ft=$(sed -E -n 's/.* ft: ([0-9]+).*/\1/p' <<<"$done_line")
    corp=$(sed -E -n 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$done_line")
    echo "fuzz $target: ${seconds} s, ${runs:-?} runs, cov ${cov:-?} edges, ft ${ft:-?} features, corpus ${corp:-?} inputs"
  else
    status=1
    echo "fuzz $target: FAILED (input kept in $artifacts/; log $log)" >&2
    tail -n 60 "$log" >&2
  fi
done
exit $status
