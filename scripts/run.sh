#!/usr/bin/env bash
# Runs `node-lifecycle-controller run`. A cluster is "given" by KUBECONFIG or by --kubeconfig /
# --context among the arguments: then the controller runs against it. Without one, a demo: a
# local control plane (etcd + kube-apiserver built from source by scripts/build-controlplane.sh),
# the controller, five simulated nodes with pods of varied tolerations; one node stops, and
# `status -w` shows it go Unknown, its taints, the countdowns and the evictions. Ctrl-C stops
# everything. The arguments go to `run` either way.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller
bin="${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller"
given=${KUBECONFIG:-}
for a in "$@"; do case "$a" in --kubeconfig*|--context*) given=yes ;; esac; done
if [[ -n "$given" ]]; then
  exec "$bin" run "$@"
fi
echo "run.sh: no cluster given (KUBECONFIG, --kubeconfig, --context): a demo on a local control plane" >&2
scripts/build-controlplane.sh >/dev/null
cargo build --release --locked -p nlc-testenv --bin controlplane
exec "${CARGO_TARGET_DIR:-target}/release/controlplane" demo --controller "$bin" -- "$@"
