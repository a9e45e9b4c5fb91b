#!/usr/bin/env bash
# Runs the steps of `make test` one after the other, says which step is running, and ends on one
# line with each step's result and time.
#
#   scripts/test-summary.sh [--log-dir DIR] STEP COMMAND [STEP COMMAND ...]
#
# STEP names the step (deps, build, ctest, ...); a leading "+" marks one the later steps need
# (deps, the build): when it fails the run stops there and the later steps are "not run". The
# other steps all run, so that one failing suite does not hide another's result. COMMAND is one
# shell command line (bash -c).
#
# Each step's output goes to the terminal as it comes and to DIR/<step>.log (default
# build/test-logs). The steps named ctest, pytest and fuzz are counted from that output, so the
# summary gives "N passed, N failed" for them: ctest's closing "...% tests passed, N tests failed
# out of M", pytest's closing "N passed, N failed, ..." and fuzz/run.sh's line per target ("fuzz
# T: ..." or "fuzz T: FAILED"). Those tools' own closing lines stay printed above the summary.
# The exit status is 0 when every step succeeded, else 1 (2 for a usage error).
set -uo pipefail
cd "$(dirname "$0")/.."

log_dir=build/test-logs
if [[ ${1:-} == --log-dir ]]; then
  if (($# < 2)); then
    echo "test-summary: --log-dir needs a directory" >&2
    exit 2
  fi
  log_dir=$2
  shift 2
fi
if (($# == 0 || $# % 2 != 0)); then
  echo "usage: scripts/test-summary.sh [--log-dir DIR] STEP COMMAND [STEP COMMAND ...] (got $# arguments)" >&2
  exit 2
fi
mkdir -p "$log_dir" || exit 2

# "95 s", "3 min 12 s", "1 h 02 min".
duration() {
  local s=$1
  if ((s < 60)); then
    printf '%d s' "$s"
  elif ((s < 3600)); then
    printf '%d min %d s' $((s / 60)) $((s % 60))
  else
    printf '%d h %02d min' $((s / 3600)) $((s % 3600 / 60))
  fi
}

# The counts of a test step from its log, "N passed, N failed[, N skipped]", or "" when the log
# has none (the tool did not get as far as its closing line).
counts() {
  local step=$1 log=$2 line passed failed skipped errors
  case $step in
    ctest)
      # "100% tests passed out of N" when none failed; "P% tests passed, F tests failed out of N".
      line=$(grep -E '^[0-9]+% tests passed(, [0-9]+ tests? failed)? out of [0-9]+' "$log" | tail -1)
      [[ -z $line ]] && return
      failed=0
      if [[ $line == *failed* ]]; then failed=$(sed -E 's/.* ([0-9]+) tests? failed out of .*/\1/' <<<"$line"); fi
      local total
      total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
      echo "$((total - failed)) passed, $failed failed"
      ;;
    pytest)
      # -q's closing line: "310 passed, 4 skipped in 241.02s (0:04:01)", "1 failed, 309 passed ...",
      # "2 errors in ...", perhaps between "=" rules.
      line=$(grep -E '[0-9]+ (passed|failed|errors?|skipped)' "$log" | grep -E ' in [0-9.]+s' | tail -1)
      [[ -z $line ]] && return
      passed=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
      failed=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || true)
      errors=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || true)
      skipped=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || true)
      failed=$((${failed:-0} + ${errors:-0}))  # an error (in a fixture, at collection) fails the run too
      echo "${passed:-0} passed, $failed failed${skipped:+, $skipped skipped}"
      ;;
    fuzz)
      passed=$(grep -cE '^fuzz [A-Za-z0-9_]+: [0-9]+ s, ' "$log")
      failed=$(grep -cE '^fuzz [A-Za-z0-9_]+: FAILED' "$log")
      ((passed + failed == 0)) && return
      echo "$passed passed, $failed failed"
      ;;
  esac
}

steps=()
results=()
overall=0
stopped=""
total_steps=$(($# / 2))
index=0
while (($# > 0)); do
  name=$1 command=$2
  shift 2
  index=$((index + 1))
  required=0
  if [[ $name == +* ]]; then
    required=1
    name=${name#+}
  fi
  steps+=("$name")
  if [[ -n $stopped ]]; then
    results+=("not run")
    continue
  fi
  log=$log_dir/$name.log
  echo "==> make test [$index/$total_steps] $name: $command"
  started=$(date +%s)
  # Python writes through a pipe in blocks; unbuffered, pytest's progress shows as it comes.
  PYTHONUNBUFFERED=1 bash -c "$command" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  elapsed=$(duration $(($(date +%s) - started)))
  counted=$(counts "$name" "$log")
  if ((status == 0)); then
    result="${counted:-ok}"
  else
    overall=1
    result="${counted:+$counted, }FAILED (exit $status)"
    ((required)) && stopped=$name
  fi
  results+=("$result ($elapsed)")
  echo "==> make test [$index/$total_steps] $name: $result in $elapsed (log: $log)"
done

summary=""
for i in "${!steps[@]}"; do
  summary+="${summary:+; }${steps[$i]} ${results[$i]}"
done
if ((overall == 0)); then
  echo "make test: all steps passed: $summary"
else
  echo "make test: FAILED${stopped:+ (stopped after $stopped)}: $summary"
fi
exit $overall
