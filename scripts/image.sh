#!/usr/bin/env bash
# Builds the container image from the real Dockerfile, here, where no registry is reachable:
# the Dockerfile's base images (build arguments whose defaults are the public Rust slim and
# distroless cc nonroot images) are replaced by local stand-ins made first:
#
#   local/debian:bookworm            debootstrap --variant=minbase bookworm, imported
#   local/rust:slim-bookworm         that + gcc and libc6-dev, this machine's Rust toolchain
#                                    (bin, lib, the x86_64 std) and CA bundle, so that cargo
#                                    reaches crates.io from the build as the host does
#   local/distroless-cc:nonroot      what distroless cc carries for this binary: glibc, libgcc,
#                                    libstdc++, CA certificates, a nonroot user 65532; no shell
#
# Then `docker build` with those as build arguments, and prints the image's size.
#
#   scripts/image.sh [TAG]           default TAG: node-lifecycle-controller:dev
#   BASE_IMAGES=real scripts/image.sh   use the Dockerfile's defaults (a machine with a registry)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-node-lifecycle-controller:dev}
CACHE_ROOT=${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { printf 'image: %s\n' "$*" >&2; }

scripts/docker-engine.sh

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

rootfs() {
  local dir="$CACHE_ROOT/debian-bookworm-rootfs"
  if [[ ! -x "$dir/bin/sh" ]]; then
    command -v debootstrap >/dev/null || { log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    rm -rf "$dir.partial" && mkdir -p "$dir.partial"
    log "debootstrap bookworm (minbase) from $MIRROR"
    debootstrap --variant=minbase bookworm "$dir.partial" "$MIRROR" >&2
    rm -rf "$dir" && mv "$dir.partial" "$dir"
  fi
  echo "$dir"
}

debian_image() {
  have_image local/debian:bookworm && return
  local dir; dir=$(rootfs)
  tar -C "$dir" -c . | docker import - local/debian:bookworm >/dev/null
  log "made local/debian:bookworm"
}

rust_image() {
  have_image local/rust:slim-bookworm && return
  local ctx; ctx=$(mktemp -d)
  local tc; tc=$(rustc --print sysroot)
  mkdir -p "$ctx/rust/lib/rustlib"
  cp -a "$tc/bin" "$ctx/rust/"
  cp -a "$tc"/lib/*.so* "$ctx/rust/lib/"
  cp -a "$tc/lib/rustlib/x86_64-unknown-linux-gnu" "$ctx/rust/lib/rustlib/"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  cat >"$ctx/Dockerfile" <<'EOF'
FROM local/debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY rust /usr/local/rust
ENV PATH=/usr/local/rust/bin:$PATH CARGO_HOME=/usr/local/cargo
EOF
  docker build -q -t local/rust:slim-bookworm "$ctx" >/dev/null
  rm -rf "$ctx"
  log "made local/rust:slim-bookworm ($(rustc --version))"
}

distroless_image() {
  have_image local/distroless-cc:nonroot && return
  local dir; dir=$(rootfs)
  local ctx; ctx=$(mktemp -d)
  mkdir -p "$ctx/etc/ssl/certs" "$ctx/lib64" "$ctx/usr/lib/x86_64-linux-gnu" "$ctx/home/nonroot" "$ctx/tmp"
  ln -s ../usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ctx/lib64/ld-linux-x86-64.so.2"
  for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libgcc_s.so.1 libstdc++.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do
    cp -aL "$dir/usr/lib/x86_64-linux-gnu/$lib" "$ctx/usr/lib/x86_64-linux-gnu/" 2>/dev/null || true
  done
  ln -s usr/lib "$ctx/lib"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/etc/group"
  chown 65532:65532 "$ctx/home/nonroot" && chmod 1777 "$ctx/tmp"
  tar -C "$ctx" -c . | docker import --change 'USER 65532:65532' - local/distroless-cc:nonroot >/dev/null
  rm -rf "$ctx"
  log "made local/distroless-cc:nonroot"
}

args=()
if [[ "${BASE_IMAGES:-local}" != real ]]; then
  debian_image
  rust_image
  distroless_image
  args=(--build-arg RUST_IMAGE=local/rust:slim-bookworm --build-arg RUNTIME_IMAGE=local/distroless-cc:nonroot)
fi
start=$(date +%s)
args+=(--build-arg "NLC_GIT_VERSION=$(git describe --tags --always --dirty 2>/dev/null || true)")
docker build "${args[@]}" -t "$TAG" .
size=$(docker image inspect --format '{{.Size}}' "$TAG")
log "built $TAG in $(( $(date +%s) - start ))s: $(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }')"
