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
  python3 python3-pytest
  dataset-fashion-mnist
  iperf3 iproute2 openssh-server openssh-client procps psmisc
  chromium chromium-driver python3-selenium prometheus
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
