#!/usr/bin/env bash
# Upstream's own end-to-end suite as a judge of this controller (docs/e2e-upstream.md).
#
#   scripts/e2e-upstream.sh build
#       Builds k8s.io/kubernetes@$K8S's e2e runner with only the spec packages the sets draw from
#       (scripts/e2e-upstream/specs_test.go: 800 specs of the suite's 3,206; from an empty Go
#       build cache 401 s against the whole suite's 593 s, 99 MB against 118 MB), from the Go
#       module proxy alone, cached under $NLC_CACHE_DIR/e2e-upstream: a second call
#       takes a second. Prints the binary's path on its last line.
#   scripts/e2e-upstream.sh run KUBECONFIG SET OUT_DIR
#       Runs the specs of SET against the cluster (kind, with this controller installed and
#       kube-controller-manager's node-lifecycle and taint-eviction controllers off), writes the
#       JUnit report and `results.md` (spec, result, seconds) to OUT_DIR, and fails when a spec
#       fails. SET: `ci` (what CI runs on every change: the two [Conformance] NoExecuteTaintManager
#       specs and the untainted-nodes one) or `all` (every spec docs/e2e-upstream.md lists).
#   scripts/e2e-upstream.sh images
#       Makes the images the pod-generation spec of `all` needs and the offline node image lacks:
#       agnhost (built from the same module, cached), nginx (the agnhost image under nginx's name:
#       the spec only swaps a running container's image and keeps its `pause` argument) and busybox
#       (a shell that exits at once, the init container's whole job). `run all` loads them.
#
# The binary is built as scripts/build-controlplane.sh builds kube-apiserver: a throwaway module
# requires k8s.io/kubernetes and replaces its staging modules (read from its go.mod) with their
# published v0.X.Y; a file of blank imports (the e2e suite's own test imports) completes go.sum.
# Same flags as the control plane's build (-trimpath, CGO off), so the Go build cache it filled
# is shared. `--provider=skeleton`: no cloud, no SSH (`local` would turn the SSH specs on).
#
# The offline kind node image holds registry.k8s.io/pause:3.10; v1.37's suite asks for 3.10.2,
# the same program: `run` tags it on every node of the cluster (CLUSTER, default nlc).
set -euo pipefail
cd "$(dirname "$0")/.."
K8S=${K8S:-v1.37.2}
CLUSTER=${CLUSTER:-nlc}
CACHE_ROOT=${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}
export PATH=$CACHE_ROOT/kind/bin:$CACHE_ROOT/tools:$PATH
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=${GOTOOLCHAIN:-local}
log() { printf 'e2e-upstream: %s\n' "$*" >&2; }
# shellcheck source=lib/k8s-module.sh
source scripts/lib/k8s-module.sh

# Spec sets: ginkgo focus expressions (one spec or group each).
CI_SPECS=(
  'NoExecuteTaintManager Single Pod removing taint cancels eviction'
  'NoExecuteTaintManager Multiple Pods evicts pods with minTolerationSeconds'
  'Conformance Tests should have at least two untainted nodes'
)
CI_COUNT=3
ALL_SPECS=(
  'NoExecuteTaintManager'
  'Node Lifecycle should run through the lifecycle of a node'
  'NodeLease NodeLease the kubelet should report node status infrequently'
  'Conformance Tests should have at least two untainted nodes'
  'Kubectl taint'
  'SchedulerPredicates validates that taints-tolerations is respected'
  'SchedulerPriorities Pod should be preferably scheduled to nodes pod can tolerate'
  'Pod Generation pod generation should start at 1 and increment per update'
)
ALL_COUNT=16
# What the specs of `all` ask for beyond pause (test/utils/image/manifest.go of $K8S).
AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.66.1
NGINX_IMAGE=registry.k8s.io/e2e-test-images/nginx:1.27.0-2
BUSYBOX_IMAGE=registry.k8s.io/e2e-test-images/busybox:1.37.0-2

build() {
  local main_sum; main_sum=$(sha256sum scripts/e2e-upstream/specs_test.go | cut -c1-10)
  local dir=$CACHE_ROOT/e2e-upstream bin=$CACHE_ROOT/e2e-upstream/e2e-$K8S-$main_sum.test
  if [[ -x $bin ]]; then
    log "cached: $bin"
    echo "$bin"
    return
  fi
  local start; start=$(date +%s)
  local work=$CACHE_ROOT/src/e2e-$K8S
  mkdir -p "$dir"
  wrapper "$work" test/e2e test/e2e/e2e_test.go
  # go.sum now holds what the whole suite needs; the binary is our test main with the spec
  # packages of the sets alone (scripts/e2e-upstream/specs_test.go).
  rm "$work/deps.go"
  cp scripts/e2e-upstream/specs_test.go "$work/"
  (cd "$work" && go test -c -trimpath -ldflags "$(k8s_ldflags "$K8S")" -o "$bin.partial" .) >&2
  mv "$bin.partial" "$bin"
  log "built $bin in $(( $(date +%s) - start ))s"
  echo "$bin"
}

# A throwaway module in WORK that requires k8s.io/kubernetes@$K8S with its staging modules replaced,
# and blank-imports PKG (when it is not a main package) and the imports of FILE, so that
# `go mod tidy` records every module they need.
wrapper() {
  local work=$1 pkg=$2 file=$3
  command -v go >/dev/null || { log "go is not installed; it is needed to build upstream's test programs"; exit 1; }
  rm -rf "$work" && mkdir -p "$work"
  local modfile src
  modfile=$(go mod download -json "k8s.io/kubernetes@$K8S" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  src=$(go mod download -json "k8s.io/kubernetes@$K8S" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -f $modfile && -d $src ]] || { log "could not download k8s.io/kubernetes@$K8S"; exit 1; }
  printf 'module nlc.local/e2e-upstream\n\ngo 1.24\n' >"$work/go.mod"
  local args
  args=$(k8s_module_edits "$K8S" "$modfile") || { log "no staging modules found in $modfile"; exit 1; }
  {
    printf 'package e2edeps\n\nimport (\n'
    grep -q '^package main$' "$src/$file" || printf '\t_ "k8s.io/kubernetes/%s"\n' "$pkg"
    sed -n '/^import (/,/^)/p' "$src/$file" | grep -v '^[[:space:]]*//' | grep -o '"[^"]*"' |
      grep -v '^"\(flag\|fmt\|os\|path/filepath\|testing\)"$' | sort -u | sed 's/^/\t_ /'
    printf ')\n'
  } >"$work/deps.go"
  # shellcheck disable=SC2086 # one argument per line, none with spaces
  (cd "$work" && go mod edit $args && go mod tidy) >&2
}

images() {
  local bin=$CACHE_ROOT/e2e-upstream/agnhost-$K8S
  if [[ ! -x $bin ]]; then
    local start; start=$(date +%s)
    wrapper "$CACHE_ROOT/src/agnhost-$K8S" test/images/agnhost test/images/agnhost/agnhost.go
    mkdir -p "$(dirname "$bin")"
    (cd "$CACHE_ROOT/src/agnhost-$K8S" && go build -trimpath -o "$bin.partial" k8s.io/kubernetes/test/images/agnhost) >&2
    mv "$bin.partial" "$bin"
    log "built $bin in $(( $(date +%s) - start ))s"
  fi
  docker image inspect local/kind-slim:bookworm >/dev/null 2>&1 ||
    { log "no local/kind-slim:bookworm image: scripts/kind-image.sh makes it with the node image"; exit 1; }
  local ctx; ctx=$(mktemp -d)
  install -m 0755 "$bin" "$ctx/agnhost"
  # As upstream's agnhost image: the program is the entrypoint, `pause` the default command.
  printf 'FROM local/kind-slim:bookworm\nCOPY agnhost /agnhost\nENTRYPOINT ["/agnhost"]\nCMD ["pause"]\n' >"$ctx/Dockerfile.agnhost"
  printf 'FROM local/kind-slim:bookworm\nCMD ["sh"]\n' >"$ctx/Dockerfile.busybox"
  docker build -q -f "$ctx/Dockerfile.agnhost" -t "$AGNHOST_IMAGE" "$ctx" >/dev/null
  docker tag "$AGNHOST_IMAGE" "$NGINX_IMAGE"
  docker build -q -f "$ctx/Dockerfile.busybox" -t "$BUSYBOX_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
  log "made $AGNHOST_IMAGE, $NGINX_IMAGE (the same program) and $BUSYBOX_IMAGE (a shell)"
}

run() {
  local kubeconfig=${1:?KUBECONFIG} set=${2:?ci or all} out=${3:?OUT_DIR}
  local bin; bin=$(build | tail -1)
  local specs=() want
  case $set in
    ci) specs=("${CI_SPECS[@]}"); want=$CI_COUNT ;;
    all) specs=("${ALL_SPECS[@]}"); want=$ALL_COUNT ;;
    *) log "unknown set $set (ci or all)"; exit 2 ;;
  esac
  mkdir -p "$out"
  local n
  for n in $(kind get nodes --name "$CLUSTER"); do
    docker exec "$n" ctr -n k8s.io images tag --force registry.k8s.io/pause:3.10 registry.k8s.io/pause:3.10.2 >/dev/null
  done
  if [[ $set == all ]]; then
    images
    kind load docker-image "$AGNHOST_IMAGE" "$NGINX_IMAGE" "$BUSYBOX_IMAGE" --name "$CLUSTER" >&2
  fi
  local focus=() s
  for s in "${specs[@]}"; do focus+=("--ginkgo.focus=$s"); done
  local rc=0 start; start=$(date +%s)
  "$bin" --provider=skeleton --kubeconfig="$kubeconfig" --report-dir="$out" \
    --ginkgo.no-color --ginkgo.v --ginkgo.timeout=2h "${focus[@]}" >"$out/e2e.log" 2>&1 || rc=$?
  log "$set: ginkgo exited $rc after $(( $(date +%s) - start ))s (log: $out/e2e.log)"
  report "$out" >"$out/results.md"
  cat "$out/results.md" >&2
  [[ $rc == 0 ]] || { tail -50 "$out/e2e.log" >&2; exit 1; }
  # A focus that matches nothing is no judge: every spec of the set must have run.
  local ran; ran=$(grep -c '| pass |' "$out/results.md" || true)
  [[ $ran == "$want" ]] || { log "$set: $ran specs ran, $want expected (a focus no longer matches?)"; exit 1; }
}

# results.md from the JUnit report: one row per spec run (skipped specs left out).
report() {
  local junit=$1/junit_01.xml
  [[ -f $junit ]] || { echo "no JUnit report in $1"; return; }
  printf '| spec | result | seconds |\n|---|---|---|\n'
  python3 - "$junit" <<'PY'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("skipped") is not None or case.get("status") == "skipped":
        continue
    name = case.get("name", "")
    if not name.startswith("[It] "):  # the suite's own setup and reports
        continue
    failed = case.find("failure") is not None or case.find("error") is not None
    print(f"| {name.removeprefix('[It] ')} | {'FAIL' if failed else 'pass'} | {float(case.get('time', 0)):.0f} |")
PY
}

# `make e2e-upstream`: a kind cluster of its own made by the README's `scripts/kind.sh up` (the
# chart with the controller and the webhook), every spec of `all`, the cluster deleted. The
# results (with the date and versions) go to OUT_DIR/results.md and docs/e2e-upstream/results.md.
on_kind() {
  local out=${1:-target/e2e-upstream}
  mkdir -p "$out" docs/e2e-upstream
  out=$(cd "$out" && pwd)
  build >/dev/null
  local kc=$out/kubeconfig rc=0
  rm -f "$kc"
  export CLUSTER=${CLUSTER_UPSTREAM:-nlc-upstream}
  trap 'scripts/kind.sh down >/dev/null 2>&1 || true' EXIT
  # kube-apiserver's DefaultTolerationSeconds off: the webhook alone adds the defaults, and the
  # pod-generation spec (which replaces a running pod's tolerations) passes only if it re-adds
  # them on UPDATE, as the plugin does.
  KUBECONFIG=$kc BUILD_IMAGE=${BUILD_IMAGE:-0} APISERVER_DEFAULT_TOLERATIONS=off scripts/kind.sh up >&2
  (run "$kc" all "$out") || rc=$?
  {
    printf '# make e2e-upstream: the last run

'
    printf 'Run %s, upstream e2e binary %s, kind node image %s, %s; `scripts/e2e-upstream.sh` (set `all`).

' \
      "$(date -u +%Y-%m-%dT%H:%MZ)" "$K8S" "${NODE_IMAGE:-scripts/kind-image.sh}" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    cat "$out/results.md"
  } >docs/e2e-upstream/results.md
  return $rc
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  images) images ;;
  kind) shift; on_kind "$@" ;;
  *) echo "usage: $0 build | images | run KUBECONFIG ci|all OUT_DIR | kind [OUT_DIR]" >&2; exit 2 ;;
esac
