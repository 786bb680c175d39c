#!/usr/bin/env bash
# make dashboard-png: docs/dashboard.png, the Grafana dashboard's panels drawn from a real run.
# The README's demo (`controlplane demo`: a local control plane, the controller, five simulated
# nodes, one of which stops; its pods are evicted) runs for DURATION seconds while a Prometheus
# built from its Go module scrapes the controller every 2 s; then scripts/dashboard_png.py
# evaluates every query of the dashboard over the run and lays the panels out as the dashboard
# does. Grafana itself cannot be built or pulled here (no registry, and it is not packaged), so
# the picture is the dashboard's data, not Grafana's rendering of it.
#
# Environment: DURATION (seconds, default 240), OUT (docs/dashboard.png), BIN (the directory of
# the release binaries; default the cargo target's release directory, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-240}
OUT=${OUT:-docs/dashboard.png}
TOOLS=${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller/tools
PROMETHEUS_VERSION=v0.316.0
log() { printf 'dashboard-png: %s\n' "$*" >&2; }

if [[ -z ${BIN:-} ]]; then
  cargo build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller
  cargo build --release --locked -p nlc-testenv --bin controlplane
  BIN=${CARGO_TARGET_DIR:-target}/release
fi
scripts/build-controlplane.sh >/dev/null
prom="$TOOLS/prometheus-$PROMETHEUS_VERSION"
if [[ ! -x $prom ]]; then
  log "building prometheus $PROMETHEUS_VERSION from its Go module (once)"
  dir=$(mktemp -d)
  (cd "$dir" && GOBIN="$dir/bin" GOFLAGS=-mod=mod go install -tags remove_all_sd \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION")
  mv "$dir/bin/prometheus" "$prom"
  rm -rf "$dir"
fi
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install --quiet matplotlib

work=$(mktemp -d)
cleanup() {
  [[ -n ${prom_pid:-} ]] && kill "$prom_pid" 2>/dev/null || true
  [[ -n ${demo_pid:-} ]] && kill -INT "$demo_pid" 2>/dev/null && wait "$demo_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

log "the demo for ${DURATION}s"
"$BIN/controlplane" demo --controller "$BIN/node-lifecycle-controller" --stop-after "$((DURATION + 30))" \
  >/dev/null 2>"$work/demo.log" &
demo_pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*metrics: http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$work/demo.log" | tail -1)
  [[ -n $port ]] && break
  kill -0 "$demo_pid" 2>/dev/null || { cat "$work/demo.log" >&2; exit 1; }
  sleep 0.5
done
[[ -n $port ]] || { log "the demo never said its metrics port"; cat "$work/demo.log" >&2; exit 1; }
cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: node-lifecycle-controller
    static_configs: [{targets: ["127.0.0.1:$port"]}]
EOF
prom_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$prom" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
start=$(date +%s)
sleep "$DURATION"
end=$(date +%s)
python3 scripts/dashboard_png.py --prometheus "http://127.0.0.1:$prom_port" \
  --dashboard charts/node-lifecycle-controller/dashboards/node-lifecycle-controller.json \
  --start "$start" --end "$end" --out "$OUT" \
  --subtitle "(make dashboard-png: the README's demo, ${DURATION}s; one of five nodes stops)"
