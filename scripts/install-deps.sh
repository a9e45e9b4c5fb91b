#!/usr/bin/env bash
# Installs what rotary's build and tests need, and nothing else; skips what is already there.
# Idempotent: a second run installs nothing and takes well under a second.
#
#   System packages (Debian, apt-get): the compiler, CMake >= 3.25, Ninja, GoogleTest/GoogleMock,
#   Google Benchmark, Highway (libhwy-dev 1.0.3, the SIMD kernels), Chromium (the report's
#   browser test, headless), clang with libclang-rt-14-dev (libFuzzer and the sanitizer
#   runtimes, for the fuzz targets in fuzz/).
#   Python packages (PyPI, into .venv): listed in scripts/requirements.txt (torch, transformers,
#   NumPy, pytest, matplotlib, and the build backend of the Python package).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(g++ make cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev chromium
              clang libclang-rt-14-dev)

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

# Python packages, pinned, into the project's own virtual environment.
requirements=scripts/requirements.txt
if [[ -f $requirements ]] && grep -qvE '^\s*(#|$)' "$requirements"; then
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
  fi
  stamp=.venv/.requirements.stamp
  if [[ ! -f $stamp ]] || ! cmp -s "$requirements" "$stamp"; then
    # torch first, alone and pinned (the CPU build on this machine's disk), so that nothing that
    # depends on torch can pull another build of it.
    torch_pin=$(grep -E '^torch==' "$requirements" || true)
    if [[ -n $torch_pin ]]; then
      .venv/bin/python -m pip install -q "$torch_pin"
    fi
    .venv/bin/python -m pip install -q -r "$requirements"
    cp "$requirements" "$stamp"
  fi
fi
