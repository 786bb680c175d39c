#!/usr/bin/env bash
# What the test suite needs from the machine besides the toolchains and the control plane that
# scripts/build-controlplane.sh builds: Debian's libfaketime (tests/clock.rs runs the controller
# under a stepped and skewed clock). Installed when missing and we are root; otherwise fail,
# saying what to install. Never skipped: a test that cannot run must fail loudly.
set -euo pipefail
LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
if [[ -e $LIB ]]; then
  exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  echo "test-deps: installing Debian's faketime (for tests/clock.rs)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends faketime >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends faketime >/dev/null; }
fi
if [[ ! -e $LIB ]]; then
  echo "test-deps: $LIB is missing; install Debian's faketime package (apt-get install faketime)" >&2
  exit 1
fi
