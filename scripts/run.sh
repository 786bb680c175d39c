#!/usr/bin/env bash
# Runs `node-lifecycle-controller run`. A cluster is "given" by KUBECONFIG or by --kubeconfig /
# --context among the arguments; without one, a local control plane (etcd + kube-apiserver built
# from source by scripts/build-controlplane.sh) is started for the run and stopped afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller
bin="${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller"
given=${KUBECONFIG:-}
for a in "$@"; do case "$a" in --kubeconfig*|--context*) given=yes ;; esac; done
if [[ -n "$given" ]]; then
  exec "$bin" run "$@"
fi
echo "run.sh: no cluster given (KUBECONFIG, --kubeconfig, --context): starting a local control plane" >&2
scripts/build-controlplane.sh >/dev/null
cargo build --release --locked -p nlc-testenv --bin controlplane
exec "${CARGO_TARGET_DIR:-target}/release/controlplane" exec -- "$bin" run --metrics-bind-address 127.0.0.1:8080 "$@"
