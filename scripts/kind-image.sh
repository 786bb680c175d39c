#!/usr/bin/env bash
# `make kind-image`: the kind node image (and the kind binary) for `make e2e-kind` and
# `scripts/kind.sh`. Prints the image name on its last line.
#
# - NLC_KIND_NODE_IMAGE given: that image (pulled if absent).
# - Otherwise, with a registry (a laptop): kind's public kindest/node:$K8S.
# - Otherwise (this project's CI: only the package registries are reachable): built here from
#   the Go module proxy and Debian's packages alone (scripts/kind/, recipe and traps in
#   docs/kind.md): every binary from source, a bookworm base image, every image kind preloads,
#   and `kind build node-image --type file`. Cached under $NLC_CACHE_DIR/kind and in Docker:
#   a second run takes seconds.
#
# Needs root on a machine without Docker (scripts/docker-engine.sh installs it), and installs
# debootstrap, libseccomp-dev and jq when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S=${KIND_K8S_VERSION:-v1.37.2}
KIND_VERSION=${KIND_VERSION:-v0.33.0}
CACHE_ROOT=${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}
export CACHE=$CACHE_ROOT/kind K8S KIND=$KIND_VERSION
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
log() { printf 'kind-image: %s\n' "$*" >&2; }
t0=$(date +%s)

scripts/docker-engine.sh
scripts/kind/host-fixes.sh

# The kind binary itself (also for `scripts/kind.sh`).
mkdir -p "$CACHE/bin"
if [[ ! -x $CACHE/bin/kind ]]; then
  GOBIN=$CACHE/bin CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION" >&2
fi

if [[ -n ${NLC_KIND_NODE_IMAGE:-} ]]; then
  docker image inspect "$NLC_KIND_NODE_IMAGE" >/dev/null 2>&1 || docker pull "$NLC_KIND_NODE_IMAGE" >&2
  echo "$NLC_KIND_NODE_IMAGE"
  exit 0
fi

# The image built here is named by what it is made of: a change to the recipe rebuilds it.
stamp=$(cat scripts/kind/*.sh scripts/kind/runc-capfix scripts/kind-image.sh | sha256sum | cut -c1-10)
IMAGE=nlc/kind-node:$K8S-$stamp
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE is built ($(( $(date +%s) - t0 ))s)"
  echo "$IMAGE"
  exit 0
fi
public=docker.io/kindest/node:$K8S
if docker image inspect "$public" >/dev/null 2>&1 || timeout 30 docker pull "$public" >&2 2>/dev/null; then
  log "using the public $public"
  echo "$public"
  exit 0
fi

log "no registry: building $IMAGE from the Go module proxy and Debian's packages"
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v jq >/dev/null || need+=(jq)
[[ -e /usr/include/seccomp.h ]] || need+=(libseccomp-dev)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
if ((${#need[@]})); then
  [[ $(id -u) -eq 0 ]] || { log "missing ${need[*]}; installing them needs root"; exit 1; }
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi
scripts/kind/build-bins.sh >&2
BASE_IMAGE=nlc/kind-base:bookworm-$stamp scripts/kind/assemble-base.sh >&2
scripts/kind/make-images.sh >&2
"$CACHE/bin/kind" build node-image --type file --base-image "nlc/kind-base:bookworm-$stamp" --image "$IMAGE" \
  "$CACHE/kubernetes-server-linux-amd64.tar.gz" >&2
docker image inspect "$IMAGE" >/dev/null
# The release-shaped tarball is inside the image now.
rm -f "$CACHE/kubernetes-server-linux-amd64.tar.gz"
log "built $IMAGE in $(( $(date +%s) - t0 ))s"
echo "$IMAGE"
