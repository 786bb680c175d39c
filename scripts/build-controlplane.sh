#!/usr/bin/env bash
# Builds the test control plane -- kube-apiserver and kube-controller-manager from the
# k8s.io/kubernetes Go module, etcd from go.etcd.io/etcd/server/v3 -- into a cache directory
# outside the checkout, and points "$CACHE_ROOT/current" at it. Idempotent: a finished build is
# reused in seconds. Prints the asset directory (envtest layout: one directory holding the
# binaries) on its last line.
#
# `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` does not work: k8s.io/kubernetes pins its
# staging modules at v0.0.0 and resolves them with local `replace` lines that Go ignores for
# dependencies. So we generate a throwaway module that requires k8s.io/kubernetes and replaces
# every staging module (read from the real go.mod, not from memory) with its published v0.X.Y.
#
# Environment:
#   KUBEBUILDER_ASSETS  a directory already holding kube-apiserver and etcd: nothing is built.
#   K8S_VERSION         one version to build, e.g. v1.33.13, or a minor (v1.33: its newest patch
#                       the Go module proxy serves); each version is cached in a directory of its own.
#   K8S_VERSIONS        versions to try in order when K8S_VERSION is not set (default "v1.37.2 v1.36.3 v1.35.4").
#   ETCD_VERSION        default: the etcd kubeadm of that Kubernetes version deploys
#                       (its DefaultEtcdVersion), else v3.6.16.
#   NLC_CACHE_DIR       default ${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller.
#
# It also builds the tools the tests use as users would, into "$CACHE_ROOT/tools": kustomize
# (what `kubectl kustomize` embeds), helm and promtool from their Go modules, and kubectl of the same
# version as the control plane, so that a machine without them renders and runs exactly what
# users do.
set -euo pipefail

K8S_VERSIONS=${K8S_VERSIONS:-"v1.37.2 v1.36.3 v1.35.4"}
ETCD_FALLBACK=v3.6.16
KUSTOMIZE_VERSION=${KUSTOMIZE_VERSION:-v5.8.2}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}
CACHE_ROOT=${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=${GOTOOLCHAIN:-local}

log() { printf 'build-controlplane: %s\n' "$*" >&2; }
# shellcheck source=lib/k8s-module.sh
source "$(dirname "$0")/lib/k8s-module.sh"

# Builds `$1` (a Go package at a version) as "$CACHE_ROOT/tools/$2-$3", linked as tools/$2;
# further arguments go to `go install`.
build_tool() {
  local pkg=$1 name=$2 ver=$3 dir="$CACHE_ROOT/tools"
  shift 3
  mkdir -p "$dir"
  if [[ ! -x "$dir/$name-$ver" ]]; then
    local start; start=$(date +%s)
    GOBIN="$dir/.gobin" go install "$@" "$pkg@$ver" >&2
    mv "$dir/.gobin/$name" "$dir/$name-$ver"
    log "built $name $ver in $(( $(date +%s) - start ))s"
  fi
  ln -sfn "$name-$ver" "$dir/$name"
}

build_tools() {
  command -v go >/dev/null || { log "go is not installed; it is needed to build kustomize and helm"; exit 1; }
  build_tool sigs.k8s.io/kustomize/kustomize/v5 kustomize "$KUSTOMIZE_VERSION"
  build_tool helm.sh/helm/v3/cmd/helm helm "$HELM_VERSION"
  # promtool checks and unit-tests the chart's alerts; without the service discovery plugins,
  # which it does not need, it builds in a fraction of the time.
  build_tool github.com/prometheus/prometheus/cmd/promtool promtool "$PROMTOOL_VERSION" -tags remove_all_sd
}


command -v go >/dev/null || { log "go is not installed; it is needed to build the test control plane"; exit 1; }
mkdir -p "$CACHE_ROOT"

# The newest patch of minor $1 (v1.33) that the Go module proxy serves.
newest_patch() {
  go list -m -versions k8s.io/kubernetes 2>/dev/null | tr ' ' '\n' | grep -E "^${1//./\\.}\.[0-9]+$" | sort -V | tail -1
}

# The etcd kubeadm of Kubernetes $1 deploys (its DefaultEtcdVersion), as vX.Y.Z.
kubeadm_etcd() {
  local src
  src=$(go mod download -json "k8s.io/kubernetes@$1" 2>/dev/null | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $src ]] || return 1
  local v
  v=$(sed -n 's/^[[:space:]]*DefaultEtcdVersion = "\([0-9.]*\)-[0-9]*"$/\1/p' "$src/cmd/kubeadm/app/constants/constants.go" | sed -n 1p)
  [[ -n $v ]] && echo "v$v"
}

build_etcd() {
  local out=$1 work="$CACHE_ROOT/src/etcd-$ETCD_VERSION"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  cat >go.mod <<MOD
module nlc.local/etcd-build

go 1.24
MOD
  go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" -tool=go.etcd.io/etcd/server/v3
  go mod tidy
  go build -trimpath -o "$out/etcd" go.etcd.io/etcd/server/v3
}

# A throwaway module at "$CACHE_ROOT/src/k8s-$1" that builds k8s.io/kubernetes@$1's commands.
k8s_module() {
  local ver=$1 work="$CACHE_ROOT/src/k8s-$1"
  local staging_ver="v0.${ver#v1.}"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  cat >go.mod <<MOD
module nlc.local/k8s-build

go 1.24
MOD
  local modfile
  modfile=$(go mod download -json "k8s.io/kubernetes@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [[ -f "$modfile" ]] || { log "could not download the go.mod of k8s.io/kubernetes@$ver"; return 1; }
  local args
  args=$(k8s_module_edits "$ver" "$modfile") || { log "no staging modules found in $modfile"; return 1; }
  log "k8s.io/kubernetes@$ver: replacing $(grep -c '^-replace=' <<<"$args") staging modules with $staging_ver"
  # shellcheck disable=SC2086 # one argument per line, none with spaces
  go mod edit $args -tool=k8s.io/kubernetes/cmd/kube-apiserver \
    -tool=k8s.io/kubernetes/cmd/kube-controller-manager -tool=k8s.io/kubernetes/cmd/kubectl
  go mod tidy
}

# Builds k8s.io/kubernetes@$1's packages $3... into $2, stamped with the version.
k8s_build() {
  local ver=$1 out=$2; shift 2
  cd "$CACHE_ROOT/src/k8s-$ver"
  go build -trimpath -ldflags "$(k8s_ldflags "$ver")" -o "$out" "$@"
}

build_k8s() {
  k8s_module "$1" && k8s_build "$1" "$2/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
}

# kubectl of the same version, for the tests that run it as users do (`kubectl nlc status`).
build_kubectl() {
  local ver=$1 dir="$CACHE_ROOT/tools"
  mkdir -p "$dir"
  if [[ ! -x "$dir/kubectl-$ver" ]]; then
    local start; start=$(date +%s)
    if ! grep -q 'k8s.io/kubernetes/cmd/kubectl' "$CACHE_ROOT/src/k8s-$ver/go.mod" 2>/dev/null; then
      (k8s_module "$ver") >&2
    fi
    (k8s_build "$ver" "$dir/kubectl-$ver" k8s.io/kubernetes/cmd/kubectl) >&2
    log "built kubectl $ver in $(( $(date +%s) - start ))s"
  fi
  ln -sfn "kubectl-$ver" "$dir/kubectl"
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in kube-apiserver etcd; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $b"; exit 1; }
  done
  log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  mkdir -p "$CACHE_ROOT"
  build_tools
  build_kubectl "${K8S_VERSIONS%% *}"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

if [[ -n "${K8S_VERSION:-}" ]]; then
  if [[ $K8S_VERSION =~ ^v1\.[0-9]+$ ]]; then
    resolved=$(newest_patch "$K8S_VERSION")
    [[ -n $resolved ]] || { log "no patch of $K8S_VERSION on the Go module proxy"; exit 1; }
    log "$K8S_VERSION: newest patch $resolved"
    K8S_VERSION=$resolved
  fi
  K8S_VERSIONS=$K8S_VERSION
fi

ETCD_VERSION_SET=${ETCD_VERSION:-}
for ver in $K8S_VERSIONS; do
  ETCD_VERSION=$ETCD_VERSION_SET
  if [[ -z $ETCD_VERSION ]]; then
    ETCD_VERSION=$(kubeadm_etcd "$ver" || true)
    ETCD_VERSION=${ETCD_VERSION:-$ETCD_FALLBACK}
  fi
  dir="$CACHE_ROOT/k8s-$ver-etcd-$ETCD_VERSION"
  if [[ -x "$dir/kube-apiserver" && -x "$dir/kube-controller-manager" && -x "$dir/etcd" ]]; then
    log "cached: $dir"
  else
    start=$(date +%s)
    rm -rf "$dir.partial" && mkdir -p "$dir.partial"
    if ! (build_k8s "$ver" "$dir.partial") >&2; then
      log "FAILED to build Kubernetes $ver; trying the next version"
      continue
    fi
    (build_etcd "$dir.partial") >&2 || { log "FAILED to build etcd $ETCD_VERSION"; exit 1; }
    rm -rf "$dir" && mv "$dir.partial" "$dir"
    log "built $dir in $(( $(date +%s) - start ))s"
  fi
  ln -sfn "$dir" "$CACHE_ROOT/current"
  build_tools
  build_kubectl "$ver"
  "$dir/kube-apiserver" --version >&2
  "$dir/etcd" --version | sed -n 1p >&2
  echo "$dir"
  exit 0
done
log "no Kubernetes version in '$K8S_VERSIONS' could be built"
exit 1
