# muster: the two commands of the README, plus benchmarks.
#   make demo   set up, build, start musterd and run the notebook examples
#   make test   set up, build, run every test (ctest: unit, mpi, integration)
#   make bench  run every benchmark, rewrite bench/RESULTS.md
MAKEFLAGS += --no-print-directory
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: setup build demo test bench bench-launch bench-allreduce bench-ps bench-train bench-api clean

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 $(CTEST_ARGS)

bench: bench-launch bench-allreduce bench-ps bench-train bench-api
	@/usr/bin/python3 bench/report.py

bench-launch: build
	@bash bench/launch/run.sh $(BUILD)

bench-allreduce: build
	@bash bench/allreduce/run.sh $(BUILD)

bench-ps: build
	@bash bench/ps/run.sh $(BUILD)

bench-train: build
	@bash bench/train/run.sh $(BUILD)

bench-api: build
	@bash bench/api/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
