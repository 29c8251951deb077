# bertcc top-level Makefile: thin wrapper around CMake.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)

.PHONY: all build deps test test-asan fuzz demo bench clean

all: build

deps:
	@./scripts/install-deps.sh

# CMAKE_ARGS: more cmake options for build/, e.g. -DCMAKE_CUDA_ARCHITECTURES=90 (.ci/run)
build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# ctest -j$(JOBS): tests declare the cores they use (PROCESSORS, CMakeLists.txt), so a 2-core machine
# runs two one-thread tests side by side and a two-thread test alone. CTEST_ARGS: e.g. -R device_staged, -L unit.
test: deps build
	@./scripts/run-tests.sh $(BUILD) -j $(JOBS) $(CTEST_ARGS)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTCC_SANITIZE=ON -DBERTCC_CUDA=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target bertcc_tests
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(ASAN_BUILD)/bertcc_tests

FUZZ_SECONDS ?= 60
fuzz: deps
	@./fuzz/run.sh $(FUZZ_SECONDS)

demo: deps build
	@./scripts/demo.sh $(BUILD)/bertcc

bench: deps build
	@./bench/peer_bench.sh $(BUILD)/bertcc

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
