"""What each job installs (scripts/install-deps.sh): `make run` needs the C++ build alone, never
torch, transformers, Chromium or clang; `make test` installs everything. And the C++ build
configures without the test-only packages when the tests and benchmarks are off."""
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-deps.sh"


def job_packages(job):
    listed = subprocess.run(["bash", str(SCRIPT), "--list", job], capture_output=True, text=True, check=True).stdout
    return [line.split(" ", 1) for line in listed.splitlines()]


def test_make_run_installs_the_cpp_build_alone():
    packages = job_packages("run")
    assert [kind for kind, _ in packages] == ["debian"] * len(packages)  # no Python package at all
    names = {name for _, name in packages}
    assert names == {"g++", "make", "cmake", "ninja-build", "libhwy-dev"}
    for heavy in ("chromium", "clang", "libclang-rt-14-dev", "libgtest-dev", "libbenchmark-dev"):
        assert heavy not in names


def test_make_test_installs_everything_and_torch_first():
    packages = job_packages("test")
    debian = {name for kind, name in packages if kind == "debian"}
    pypi = [name for kind, name in packages if kind == "pypi"]
    assert {"libhwy-dev", "chromium", "clang", "libgtest-dev"} <= debian
    assert pypi[0] == "torch==2.13.0"  # the CPU build on this machine's disk, before what depends on it
    assert any(name.startswith("transformers==") for name in pypi)


def test_an_unknown_job_is_refused_by_name():
    run = subprocess.run(["bash", str(SCRIPT), "--list", "bench"], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == "install-deps: unknown job 'bench' (expected run or test)"


def test_the_run_build_configures_without_test_packages(tmp_path):
    """make run's configuration (tests and benchmarks off) must not look for GoogleTest or Google
    Benchmark: configure with both forbidden. Configure only: building is make test's job."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is required (scripts/install-deps.sh installs it)")
    run = subprocess.run(
        [cmake, "-S", str(ROOT), "-B", str(tmp_path / "build"), "-G", "Ninja", "-DROTARY_BUILD_TESTS=OFF",
         "-DROTARY_BUILD_BENCH=OFF", "-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON",
         "-DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_Python=ON",
         "-DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON"],
        capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_a_missing_highway_says_what_to_install(tmp_path):
    run = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(tmp_path / "build"), "-G", "Ninja", "-DROTARY_BUILD_TESTS=OFF",
         "-DROTARY_BUILD_BENCH=OFF", "-DCMAKE_DISABLE_FIND_PACKAGE_hwy=ON"],
        capture_output=True, text=True)
    assert run.returncode != 0
    message = " ".join(run.stderr.split())
    assert "rotary needs Highway (Google's portable SIMD library, 1.0 or newer) and CMake did not find it" in message
    assert "apt install libhwy-dev" in message and "CMAKE_PREFIX_PATH=<prefix> pip install ." in message
