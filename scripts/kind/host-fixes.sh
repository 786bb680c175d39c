#!/usr/bin/env bash
# The host workarounds kind needs on a machine like this project's CI (docs/kind.md, blockers 1-3):
# where the capability bounding set lacks a capability (here CAP_SYS_RESOURCE), Docker 20.10
# cannot start any --privileged container, so kind's nodes cannot start. runc-capfix, made
# dockerd's default runtime, drops what the bounding set lacks from each container's spec.
# Nothing is changed on a host with the full bounding set. Idempotent.
set -euo pipefail
log() { printf 'kind host-fixes: %s\n' "$*" >&2; }
here=$(cd "$(dirname "$0")" && pwd)
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
last=$(cat /proc/sys/kernel/cap_last_cap)
full=$(printf '%016x' $(( (1 << (last + 1)) - 1 )))
if [[ $bnd == "$full" ]]; then
  exit 0
fi
if [[ $(docker info --format '{{.DefaultRuntime}}' 2>/dev/null) == runc-capfix ]]; then
  exit 0
fi
[[ $(id -u) -eq 0 ]] || { log "the capability bounding set ($bnd) lacks capabilities and fixing Docker needs root"; exit 1; }
command -v jq >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq >&2
install -m 0755 "$here/runc-capfix" /usr/local/bin/runc-capfix
conf=/etc/docker/daemon.json
if [[ -s $conf ]]; then
  tmp=$(mktemp)
  jq '.runtimes["runc-capfix"] = {path: "/usr/local/bin/runc-capfix"} | .["default-runtime"] = "runc-capfix"' "$conf" >"$tmp"
  mv "$tmp" "$conf"
else
  mkdir -p /etc/docker
  printf '{ "runtimes": { "runc-capfix": { "path": "/usr/local/bin/runc-capfix" } },\n  "default-runtime": "runc-capfix" }\n' >"$conf"
fi
log "capability bounding set $bnd (full: $full): runc-capfix is now dockerd's default runtime"
kill -HUP "$(pidof dockerd)"
for _ in $(seq 1 20); do
  [[ $(docker info --format '{{.DefaultRuntime}}' 2>/dev/null) == runc-capfix ]] && exit 0
  sleep 0.5
done
log "dockerd did not take the new default runtime"
exit 1
