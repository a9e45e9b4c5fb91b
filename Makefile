# The README's commands. A thin wrapper over CMake; every target first installs what is missing.
#   make run    install the C++ build's packages only (compiler, CMake, Ninja, Highway), build,
#               then on the default preset (llama-3.1-8b): explain, check, a short bench, and the
#               HTML report (build/report.html)
#   make test   install everything (tests, browser, clang, Python packages), build, run every
#               test (ctest, then pytest on the installed Python package, then each fuzzer
#               briefly), a progress line per step and one summary line at the end
#   make python install the Python package into .venv (pip install ., incremental)
#   make install   headers, libraries, CMake package and command under PREFIX (default /usr/local)
#   make bench  install, build, run the benchmarks
#   make sanitize  every test under ASan+UBSan, the threaded ones under TSan
#   make fuzz   every libFuzzer target for FUZZ_SECONDS each (build-fuzz, clang)
#   make peers  the peer engines the real-model comparisons run beside rotary (llama.cpp through
#               llama-cpp-python, built from its source distribution: minutes); not in `make test`
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake
PYTHON ?= .venv/bin/python
PREFIX ?= /usr/local
# Sub-makes run by scripts/test-summary.sh. Not written as $(MAKE) in the recipe: GNU make runs a
# line that names $(MAKE) even under `make -n`, and `make -n test` must only print.
SUBMAKE = $(MAKE) --no-print-directory

.PHONY: all deps deps-run configure configure-run build build-run python install run test bench sanitize \
        fuzz-build fuzz fuzz-brief peers clean

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
	@echo "python: pip install . into .venv (compiles the extension in build/python-*: minutes the first time, quiet)"
	$(PYTHON) -m pip install --no-build-isolation -q .

install: build-run
	$(CMAKE) --install $(BUILD_DIR) --prefix $(PREFIX)

# The steps in turn through scripts/test-summary.sh: a "==> make test [i/6] STEP" line before and
# after each, each step's output also in $(BUILD_DIR)/test-logs/STEP.log, and one closing line
# with every step's result ("N passed, N failed" for ctest, pytest and fuzz) and time. A failed
# deps, build or python step stops the run ("+": the later steps need it); the suites all run.
test:
	@scripts/test-summary.sh --log-dir $(BUILD_DIR)/test-logs \
	  +deps '$(SUBMAKE) deps' \
	  +build '$(SUBMAKE) build' \
	  +python '$(SUBMAKE) python' \
	  ctest 'ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j $(JOBS)' \
	  pytest '$(PYTHON) -m pytest -q tests/python' \
	  fuzz '$(SUBMAKE) fuzz-brief'

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
# The first configure's output goes to $(FUZZ_DIR)/configure.log (its end is printed if it fails).
fuzz-build: deps
	@if [ ! -f $(FUZZ_DIR)/CMakeCache.txt ]; then \
	  echo "fuzz: configuring $(FUZZ_DIR) (clang, ASan + UBSan, libFuzzer; log: $(FUZZ_DIR)/configure.log)"; \
	  mkdir -p $(FUZZ_DIR); \
	  CC=clang CXX=clang++ $(CMAKE) -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DROTARY_SANITIZE=address,undefined -DROTARY_BUILD_FUZZ=ON -DROTARY_BUILD_TESTS=OFF -DROTARY_BUILD_BENCH=OFF \
	    >$(FUZZ_DIR)/configure.log 2>&1 || { tail -n 40 $(FUZZ_DIR)/configure.log; exit 1; }; \
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

# llama.cpp on SmolLM2-135M's weights (scripts/llama_cpp_peer.py, scripts/bench_real_model.py
# --llama-cpp; docs/interop.md): llama-cpp-python built here from its source distribution for this
# CPU (GGML_NATIVE), without its examples, tools and server. Without AMX: a CPU can list AMX in
# cpuid while its kernel or hypervisor does not enable the tile state (seen: ggml's Q4_1 matmul
# died of SIGILL on tileloadd). --no-cache-dir: pip's wheel cache does not key on CMAKE_ARGS.
# pip skips it once installed (pip uninstall llama-cpp-python to rebuild).
PEERS_NO_AMX = -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
PEERS_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF '-DCMAKE_C_FLAGS=$(PEERS_NO_AMX)' '-DCMAKE_CXX_FLAGS=$(PEERS_NO_AMX)'
peers: python
	@echo "peers: pip install -r scripts/requirements-peers.txt (builds llama.cpp from source: minutes the first time)"
	CMAKE_ARGS="$(PEERS_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PYTHON) -m pip install -q --no-cache-dir \
	  --no-binary llama-cpp-python -r scripts/requirements-peers.txt

clean:
	rm -rf $(BUILD_DIR)
