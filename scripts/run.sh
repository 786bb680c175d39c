#!/usr/bin/env bash
# Runs `node-lifecycle-controller run`. A cluster is given only on the command line:
# `--kubeconfig FILE` or `--context NAME` among the arguments (`make run ARGS="--context prod"`).
# Then the controller runs against it, writing. An exported KUBECONFIG alone is not a choice
# (most shells have one): the controller then runs in shadow mode (--dry-run: it decides
# everything and writes nothing), saying so. Without either, a demo: a local control plane (etcd +
# kube-apiserver built from source by scripts/build-controlplane.sh), the controller, five
# simulated nodes with pods of varied tolerations; one node stops, and `status -w` shows it go
# Unknown, its taints, the countdowns and the evictions. Ctrl-C stops everything. The arguments go
# to `run` either way.
set -euo pipefail
cd "$(dirname "$0")/.."
# NLC_RUN_BIN: run another binary (tests check this script's choice with a stand-in).
if [[ -z "${NLC_RUN_BIN:-}" ]]; then
  cargo build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller
fi
bin="${NLC_RUN_BIN:-${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller}"
given=
for a in "$@"; do case "$a" in --kubeconfig*|--context*) given=yes ;; esac; done
if [[ -n "$given" ]]; then
  exec "$bin" run "$@"
fi
if [[ -n "${KUBECONFIG:-}" || -f "$HOME/.kube/config" ]]; then
  echo "run.sh: a kubeconfig is in the environment, but no cluster was named on the command line:" >&2
  echo "run.sh: SHADOW MODE (--dry-run): deciding against the current context, writing nothing." >&2
  echo "run.sh: to write to that cluster, name it: make run ARGS=\"--context <name>\" (or --kubeconfig FILE)" >&2
  exec "$bin" run --dry-run "$@"
fi
echo "run.sh: no cluster given (--kubeconfig, --context): a demo on a local control plane" >&2
scripts/build-controlplane.sh >/dev/null
cargo build --release --locked -p nlc-testenv --bin controlplane
exec "${CARGO_TARGET_DIR:-target}/release/controlplane" demo --controller "$bin" -- "$@"
