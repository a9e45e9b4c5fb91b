# The README's commands. A thin wrapper over CMake; every target first installs what is missing.
#   make run    install, build, then on the default preset (llama-3.1-8b): explain, check,
#               a short bench, and the HTML report (build/report.html)
#   make test   install, build, run every test (ctest)
#   make bench  install, build, run the benchmarks
#   make sanitize  every test under ASan+UBSan, the threaded ones under TSan
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake

.PHONY: all deps configure build run test bench sanitize clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  $(CMAKE) -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE); \
	fi

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

# The main job on the default preset (llama-3.1-8b): what its RoPE does, its property checks, a
# short benchmark against this machine's copy bandwidth, and the HTML report.
run: build
	./$(BUILD_DIR)/rotary explain
	./$(BUILD_DIR)/rotary check
	./$(BUILD_DIR)/rotary bench --quick --torch none
	./$(BUILD_DIR)/rotary report -o $(BUILD_DIR)/report.html
	@echo "report: $(abspath $(BUILD_DIR)/report.html)"

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded
# tests under ThreadSanitizer, each in its own build directory (Debug-level optimization -O1).
SANITIZE_TSAN_TESTS ?= Concurrent|Thread|RopeCache|ApplyCpu.(BitwiseIdentical|Concurrent|Decode)
sanitize: deps
	$(CMAKE) -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROTARY_SANITIZE=address,undefined -DROTARY_BUILD_BENCH=OFF
	$(CMAKE) --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS)
	$(CMAKE) -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROTARY_SANITIZE=thread -DROTARY_BUILD_BENCH=OFF
	$(CMAKE) --build build-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -R '$(SANITIZE_TSAN_TESTS)'

# Benchmarks: medians of 5 repetitions (the machine is shared and noisy).
bench: build
	./$(BUILD_DIR)/bench/rotary_table_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	./$(BUILD_DIR)/bench/rotary_apply_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	./$(BUILD_DIR)/rotary bench

clean:
	rm -rf $(BUILD_DIR)
