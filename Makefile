# bertcc top-level Makefile: thin wrapper around CMake.
BUILD      ?= build
ASAN_BUILD  = build-fuzz
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

# The unit tests under ASan + UBSan, built with clang in build-fuzz, the tree make fuzz uses (fuzz/run.sh
# configures it): the library is compiled once under the sanitizers for both. UBSan's reports are
# fatal (halt_on_error=1: what -fno-sanitize-recover does in a -DBERTCC_SANITIZE=ON build). OMP_WAIT_POLICY=passive:
# clang's OpenMP runtime spins 200 ms after each parallel region, which on a busy machine starves the
# test's own threads (Model.*: 45 s instead of 7 s on 2 shared cores).
test-asan: deps
	@./fuzz/run.sh --build bertcc_tests
	@OMP_WAIT_POLICY=passive ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(ASAN_BUILD)/bertcc_tests

FUZZ_SECONDS ?= 60
fuzz: deps
	@./fuzz/run.sh $(FUZZ_SECONDS)

demo: deps build
	@./scripts/demo.sh $(BUILD)/bertcc

bench: deps build
	@./bench/peer_bench.sh $(BUILD)/bertcc

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-asan
