# muster: the two commands of the README, plus benchmarks.
#   make demo   set up, build what the demo runs (CMake target demo_programs),
#               start musterd and run the notebook examples
#   make test   set up, build everything (tests included, and once per machine
#               the Kubernetes control plane: scripts/kubernetes.sh), run
#               every test (ctest: unit, mpi, integration)
#   make bench  run every benchmark, rewrite bench/RESULTS.md
#   make fuzz   run every libFuzzer target for FUZZ_SECONDS (default 60) each
MAKEFLAGS += --no-print-directory
BUILD ?= build
JOBS  ?= $(shell nproc)
FUZZ_SECONDS ?= 60

.PHONY: setup configure build demo test fuzz bench bench-launch bench-allreduce bench-ps bench-train bench-api bench-torch bench-multihost bench-shaped bench-logs bench-elastic bench-kubernetes bench-fleet clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target demo_programs
	@bash scripts/demo.sh $(BUILD)

test: build
	@bash scripts/kubernetes.sh
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 $(CTEST_ARGS)

fuzz: setup
	@FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh run

bench: bench-launch bench-allreduce bench-ps bench-train bench-api bench-torch bench-multihost bench-shaped bench-logs bench-elastic bench-kubernetes bench-fleet
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

bench-logs: build
	@/usr/bin/python3 bench/logs/run.py $(BUILD)

bench-torch: build
	@bash bench/torch/run.sh $(BUILD)

bench-elastic: build
	@bash bench/elastic/run.sh $(BUILD)

bench-kubernetes: build
	@bash bench/kubernetes/run.sh $(BUILD)

bench-fleet: build
	@bash bench/fleet/run.sh $(BUILD)

bench-multihost: build
	@bash bench/multihost/run.sh $(BUILD)

bench-shaped: build
	@bash bench/multihost/shaped.sh $(BUILD)

clean:
	rm -rf $(BUILD)
