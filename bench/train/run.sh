#!/usr/bin/env bash
# Training throughput (and accuracy) of examples/fashion_mnist in every mode.
#   bench/train/run.sh <build-dir>      (make bench-train)
# Writes bench/out/train.json and bench/out/train.md. BENCH_TRAIN_ACCURACY=0
# skips the full-dataset accuracy runs (throughput only, about a minute).
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/train/run.sh <build-dir>}" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec /usr/bin/python3 "$HERE/train_bench.py" "$BUILD"
