# The README's commands. A thin wrapper over CMake; every target first installs what is missing.
#   make run    install the C++ build's packages only (compiler, CMake, Ninja, Highway), build,
#               then on the default preset (llama-3.1-8b): explain, check, a short bench, and the
#               HTML report (build/report.html)
#   make test   install everything (tests, browser, clang, Python packages), build, run every
#               test (ctest, then pytest on the installed Python package)
#   make python install the Python package into .venv (pip install ., incremental)
#   make install   headers, libraries, CMake package and command under PREFIX (default /usr/local)
#   make bench  install, build, run the benchmarks
#   make sanitize  every test under ASan+UBSan, the threaded ones under TSan
#   make fuzz   every libFuzzer target for FUZZ_SECONDS each (build-fuzz, clang)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake
PYTHON ?= .venv/bin/python
PREFIX ?= /usr/local

.PHONY: all deps deps-run configure configure-run build build-run python install run test bench sanitize \
        fuzz-build fuzz fuzz-brief clean

all: build

# What each job installs (scripts/install-deps.sh): `run` the C++ build alone; everything else
# the whole set (tests, benchmarks, browser, clang, the Python packages).
deps:
	@scripts/install-deps.sh test
deps-run:
	@scripts/install-deps.sh run

# One build directory for both; `make run` configures it without the tests and benchmarks (their
# libraries are not installed for it), `make test` with them. Switching reuses every object.
configure: deps
	$(CMAKE) -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DROTARY_BUILD_TESTS=ON \
	  -DROTARY_BUILD_BENCH=ON >/dev/null
configure-run: deps-run
	$(CMAKE) -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DROTARY_BUILD_TESTS=OFF \
	  -DROTARY_BUILD_BENCH=OFF >/dev/null

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)
build-run: configure-run
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

# The main job on the default preset (llama-3.1-8b): what its RoPE does, its property checks, a
# short benchmark against this machine's copy bandwidth, and the HTML report.
run: build-run
	./$(BUILD_DIR)/rotary explain
	./$(BUILD_DIR)/rotary check
	./$(BUILD_DIR)/rotary bench --quick --torch none
	./$(BUILD_DIR)/rotary report -o $(BUILD_DIR)/report.html
	@echo "report: $(abspath $(BUILD_DIR)/report.html)"

# The Python package (pyproject.toml, scikit-build-core): built in build/python-<tag> and
# installed into .venv; a rebuild after a change recompiles only what changed.
python: deps
	$(PYTHON) -m pip install --no-build-isolation -q .

install: build-run
	$(CMAKE) --install $(BUILD_DIR) --prefix $(PREFIX)

test: build python
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	$(PYTHON) -m pytest -q tests/python
	$(MAKE) fuzz-brief

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded
# tests under ThreadSanitizer, each in its own build directory (Debug-level optimization -O1).
SANITIZE_TSAN_TESTS ?= Concurrent|Thread|RopeCache|ApplyCpu.(BitwiseIdentical|Concurrent|Decode)|ReliabilityConcurrent
sanitize: deps
	$(CMAKE) -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROTARY_SANITIZE=address,undefined -DROTARY_BUILD_BENCH=OFF
	$(CMAKE) --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS)
	$(CMAKE) -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROTARY_SANITIZE=thread -DROTARY_BUILD_BENCH=OFF
	$(CMAKE) --build build-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -R '$(SANITIZE_TSAN_TESTS)'

# Fuzzing (docs/reliability.md): one libFuzzer target per input parser, built with clang and
# ASan + UBSan in build-fuzz (CMake adds -fsanitize=fuzzer-no-link to the libraries and
# -fsanitize=fuzzer to the targets). `make fuzz` runs each for FUZZ_SECONDS; `make test` runs
# each for FUZZ_BRIEF_SECONDS so that CI catches regressions. Any crash fails the target.
FUZZ_DIR ?= build-fuzz
FUZZ_TARGETS ?= hf_config npy cli apply_args cos_sin safetensors attention_args kv_cache_ops
FUZZ_SECONDS ?= 600
FUZZ_BRIEF_SECONDS ?= 20
fuzz-build: deps
	@if [ ! -f $(FUZZ_DIR)/CMakeCache.txt ]; then \
	  CC=clang CXX=clang++ $(CMAKE) -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DROTARY_SANITIZE=address,undefined -DROTARY_BUILD_FUZZ=ON -DROTARY_BUILD_TESTS=OFF -DROTARY_BUILD_BENCH=OFF; \
	fi
	$(CMAKE) --build $(FUZZ_DIR) -j $(JOBS) --target fuzz_targets

fuzz: fuzz-build
	fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# A fixed seed: CI repeats the mutations that ran here, rather than betting on new ones (a new
# finding would turn CI red on an unrelated change); `make fuzz` explores with random seeds.
FUZZ_BRIEF_SEED ?= 1
fuzz-brief: fuzz-build
	FUZZ_SEED=$(FUZZ_BRIEF_SEED) fuzz/run.sh $(FUZZ_DIR) $(FUZZ_BRIEF_SECONDS) $(FUZZ_TARGETS)

# Benchmarks: medians of 5 repetitions (the machine is shared and noisy).
bench: build
	./$(BUILD_DIR)/bench/rotary_table_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	./$(BUILD_DIR)/bench/rotary_apply_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	./$(BUILD_DIR)/rotary bench

clean:
	rm -rf $(BUILD_DIR)
