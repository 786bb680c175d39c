#!/usr/bin/env bash
# Makes sure a Docker engine answers: installs Debian's docker.io when dockerd is missing (as
# root), starts dockerd in the background when nothing answers, and waits for it. Fails, saying
# why, when it cannot: a container test that cannot run must fail, never skip.
set -euo pipefail
log() { printf 'docker-engine: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { log "no Docker engine, and installing one needs root (apt-get install docker.io)"; exit 1; }
  log "installing docker.io and debootstrap from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io debootstrap >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io debootstrap >&2; } \
    || { log "apt-get install docker.io failed"; exit 1; }
fi
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >&2 || true
[[ $(id -u) -eq 0 ]] || { log "dockerd is installed but not running, and starting it needs root"; exit 1; }
log "starting dockerd (log: /tmp/dockerd.log)"
nohup dockerd >/tmp/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { log "dockerd is up"; exit 0; }
  sleep 1
done
log "dockerd did not come up within 60 s; its log:"
tail -20 /tmp/dockerd.log >&2
exit 1
