#!/usr/bin/env bash
# `make test-matrix`: the whole suite (`cargo test --workspace`: unit and integration tests)
# and the image run (`make e2e`'s test) against every supported Kubernetes minor, each on its own
# control plane built from source (scripts/build-controlplane.sh with K8S_VERSION: the newest
# patch the Go module proxy serves, and the etcd kubeadm of that version deploys; cached per
# version). Writes docs/matrix.md (version x suite: pass/fail and time) and keeps every log in
# target/matrix/. The newest version is built last, so that it stays the default afterwards.
#
#   MATRIX_VERSIONS="v1.33 v1.37" scripts/test-matrix.sh   a subset
#   MATRIX_E2E=0                                          without the image run
set -uo pipefail
cd "$(dirname "$0")/.."
VERSIONS=${MATRIX_VERSIONS:-"v1.33 v1.34 v1.35 v1.36 v1.37"}
E2E=${MATRIX_E2E:-1}
IMAGE=${E2E_IMAGE:-node-lifecycle-controller:dev}
LOGS=target/matrix
mkdir -p "$LOGS"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}/cargo-target}
log() { printf 'test-matrix: %s\n' "$*" >&2; }

scripts/test-deps.sh || exit 1
cargo build --locked -p nlc-testenv --bin controlplane >&2 || exit 1
cargo test --workspace --locked --no-run >&2 || exit 1
if [[ $E2E == 1 ]]; then
  scripts/image.sh "$IMAGE" >&2 || exit 1
  cargo test --locked --features e2e --test e2e --no-run >&2 || exit 1
fi

rows=()
failed=0
for v in $VERSIONS; do
  start=$(date +%s)
  if ! assets=$(K8S_VERSION=$v scripts/build-controlplane.sh 2>"$LOGS/$v-build.log" | tail -1) || [[ -z $assets ]]; then
    rows+=("| $v | build failed (target/matrix/$v-build.log) | | | |")
    failed=1
    continue
  fi
  built=$(( $(date +%s) - start ))
  name=$(basename "$assets") # k8s-v1.33.13-etcd-v3.5.21
  k8s=${name#k8s-}; k8s=${k8s%%-etcd-*}; etcd=${name##*-etcd-}
  log "$k8s (etcd $etcd): the suite"
  start=$(date +%s)
  if KUBEBUILDER_ASSETS=$assets cargo test --workspace --locked --no-fail-fast >"$LOGS/$k8s-test.log" 2>&1; then
    suite="pass"
  else
    n=$(grep -c '^test .* FAILED$' "$LOGS/$k8s-test.log")
    suite="**FAIL** ($n: $(grep '^test .* FAILED$' "$LOGS/$k8s-test.log" | awk '{print $2}' | sort -u | sed -n 1,5p | paste -sd, -))"
    failed=1
  fi
  suite_time=$(( $(date +%s) - start ))
  e2e="-"; e2e_time=""
  if [[ $E2E == 1 ]]; then
    start=$(date +%s)
    if KUBEBUILDER_ASSETS=$assets NLC_E2E_IMAGE=$IMAGE cargo test --locked --features e2e --test e2e >"$LOGS/$k8s-e2e.log" 2>&1; then
      e2e="pass"
    else
      e2e="**FAIL**"
      failed=1
    fi
    e2e_time="$(( $(date +%s) - start )) s"
  fi
  passed=$(grep -o '[0-9]* passed' "$LOGS/$k8s-test.log" | awk '{s += $1} END {print s + 0}')
  rows+=("| $k8s | $etcd | $suite ($passed tests) | ${suite_time} s | $e2e ${e2e_time:+($e2e_time)} | ${built} s |")
  log "$k8s: suite $suite in ${suite_time}s, e2e $e2e"
done

{
  echo "# Version matrix"
  echo
  echo "\`make test-matrix\` on $(date -u +%Y-%m-%d) ($(nproc) cores): the whole suite and the image run against each"
  echo "supported Kubernetes minor, on a control plane built from source (the newest patch the Go module"
  echo "proxy serves, and the etcd kubeadm of that version deploys). Logs in \`target/matrix/\`."
  echo
  echo "| Kubernetes | etcd | \`cargo test --workspace\` | time | image run (\`make e2e\`) | control plane build |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >docs/matrix.md
cat docs/matrix.md
exit $failed
