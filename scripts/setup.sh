#!/usr/bin/env bash
# One idempotent set-up step for a fresh Debian machine: every package muster
# builds, tests, benchmarks or demos with. `make demo`, `make test` and
# `make bench` all call it; it does nothing when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake make pkg-config ccache git
  libcpprest-dev libssl-dev nlohmann-json3-dev
  libboost-dev libboost-filesystem-dev libboost-system-dev
  libssh2-1-dev libopenmpi-dev openmpi-bin
  libspdlog-dev libgtest-dev libgmock-dev libsqlite3-dev libeigen3-dev
  libcli11-dev zlib1g-dev
  libyaml-cpp-dev                              # the kubernetes backend reads kubeconfigs (YAML)
  python3 python3-pytest python3-jsonschema python3-yaml
  python3-dev pybind11-dev python3-numpy python3-torch libopenblas0-pthread
  # SDK: notebooks run in a real kernel (nbclient, ipykernel); pip install of sdk/python
  # offline into a venv (pip, setuptools, wheel, venv).
  python3-nbclient python3-ipykernel python3-pip python3-setuptools python3-wheel python3-venv
  dataset-fashion-mnist
  iperf3 iproute2 openssh-server openssh-client procps psmisc util-linux
  slurm-wlm munge                              # the Slurm backend's tests run a real Slurm
  clang libfuzzer-14-dev libclang-rt-14-dev   # tests/fuzz: libFuzzer + ASan/UBSan runtimes
  wrk                                          # bench/api: load against musterd's REST API
  chromium chromium-driver python3-selenium   # the dashboard's tests drive a real browser
  prometheus                                   # ... and a real Prometheus scrapes /metrics
  libnss3-tools                                # certutil: Chromium trusts musterd's certificate (tests/dashboard_https_test.py)
  python3-cloudpickle python3-mock             # imported by Horovod's test utilities (tests/horovod_suite.py)
  golang-go rsync jq dpkg-dev                  # scripts/kubernetes.sh builds Kubernetes from Debian's source package
  etcd-server containerd runc                  # tests/kubernetes_testbed.py: etcd under the apiserver, the kubelets' runtime
  containernetworking-plugins openssl          # ... the pods' network (bridge, host-local) and the testbed's certificates
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The OpenAPI validators (ctest openapi_document) and the API docs renderer:
# npm packages pinned by tests/openapi/package-lock.json. Node may come from
# elsewhere than Debian (nodesource's nodejs bundles npm and conflicts with
# Debian's npm package), so Debian's nodejs and npm are installed only when
# `node` or `npm` is missing. `npm ci` runs only when node_modules is absent
# or older than the lock file, so a second run needs no network.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs npm"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
openapi_tools="$(cd "$(dirname "$0")/.." && pwd)/tests/openapi"
if [ ! -f "$openapi_tools/node_modules/.package-lock.json" ] ||
   [ "$openapi_tools/package-lock.json" -nt "$openapi_tools/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in tests/openapi"
  (cd "$openapi_tools" && npm ci --no-audit --no-fund --loglevel=error)
fi
