#!/usr/bin/env bash
# Keeps a CI machine that reuses its caches from filling its disk: shows what is free, and below
# NLC_MIN_FREE_GB (default 15) drops what is cheap to rebuild: Cargo's incremental caches, test
# binaries of older builds, dangling Docker images and kind node images of older recipes.
set -euo pipefail
log() { printf 'ci-disk: %s\n' "$*" >&2; }
cache=${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}
target=${CARGO_TARGET_DIR:-$cache/cargo-target}
free_gb() { df -Pk "$cache" 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }'; }
mkdir -p "$cache"
min=${NLC_MIN_FREE_GB:-15}
log "$(free_gb) GB free under $cache (minimum $min)"
(( $(free_gb) >= min )) && exit 0
rm -rf "$target"/debug/incremental "$target"/release/incremental
# Test and bench executables of earlier builds (each build leaves one per hash, 100-500 MB each; 12 GB
# were found): not libraries, which dependencies' builds reuse. A current one, if any, is relinked.
find "$target"/debug/deps "$target"/release/deps -maxdepth 1 -type f -mmin +180 -size +20M \
  ! -name '*.rlib' ! -name '*.rmeta' ! -name '*.so' ! -name '*.d' -delete 2>/dev/null || true
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  docker image prune -f >/dev/null || true
  # Newest first: keep the newest node and base image (today's recipe), drop older ones.
  for repo in nlc/kind-node nlc/kind-base; do
    docker images --format '{{.Repository}}:{{.Tag}}' "$repo" | tail -n +2 |
      while read -r image; do docker rmi "$image" >/dev/null 2>&1 || true; done
  done
fi
log "$(free_gb) GB free after cleaning"
if (( $(free_gb) < 5 )); then
  log "under 5 GB free: the build and the kind cluster would fail part-way; free space on this machine"
  exit 1
fi
