# The README's commands. A thin wrapper over CMake; every target first installs what is missing.
#   make run    install, build, explain the default preset (llama-3.1-8b)
#   make test   install, build, run every test (ctest)
#   make bench  install, build, run the benchmarks
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake

.PHONY: all deps configure build run test bench clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  $(CMAKE) -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE); \
	fi

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/rotary explain

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# Benchmarks: medians of 5 repetitions (the machine is shared and noisy).
bench: build
	./$(BUILD_DIR)/bench/rotary_table_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

clean:
	rm -rf $(BUILD_DIR)
