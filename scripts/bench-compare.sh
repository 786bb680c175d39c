#!/usr/bin/env bash
# make bench-compare: the taint eviction storm (`bench eviction`: NODES x 30 pods, TARGET nodes'
# pods evicted: a third at once, two thirds after 10-30 s; every node tainted NoExecute at once),
# RUNS times for each configuration and size, each run on a fresh control plane; then the table
# (docs/bench/compare.md) and the chart (docs/bench/compare.svg and .png).
#
# Configurations, interleaved within each round so that drift of the machine hits all alike:
#   floor        the API floor, the fastest any client could go: a raw client making the
#                controller's two writes per pod, its streaming list in protobuf, over HTTP/2
#                (--floor-wire protobuf --floor-http2)
#   floor-http1  the same over HTTP/1.1 (--floor-wire protobuf): on two shared cores the faster
#                of the two (the API server spends more CPU on HTTP/2). The table's "floor +x"
#                is against whichever floor was fastest.
#   floor-json   the floor as it was: JSON over HTTP/1.1 (--floor-wire json)
#   ours         node-lifecycle-controller at its defaults (no client rate limit; protobuf lists
#                and watches of pods, nodes and Leases; HTTP/1.1)
#   ours-h2      the same with --api-http2 (one multiplexed HTTP/2 connection)
#   ours-json    the same with --kube-api-content-type=application/json (JSON lists and watches)
# and, not run unless named in CONFIGS, ours with one cost the floor does not pay switched:
#   ours-read-cache       --eviction-node-read=cache (the node read from the watch cache)
#   ours-no-read          --eviction-node-read=none
#   ours-events-per-node  --eviction-events=per-node
#   ours-no-events        --eviction-events=none
# and the floor plus the one thing every controller does that it does not:
#   floor-watch           the floor keeping a protobuf watch of the pods (--floor-watch-pods)
#   kcm-budget   kube-controller-manager v1.37.2 with --kube-api-qps=2000 --kube-api-burst=2000
#   kcm-default  kube-controller-manager at its defaults (20 qps, burst 30)
# (kube-controller-manager at its defaults lists and watches in protobuf over HTTP/2.)
#
# Then the node lifecycle workload (`bench lifecycle`), for ours and kube-controller-manager at
# both budgets: LC_SIZES nodes heartbeating through their Leases for LC_STEADY seconds (600)
# every LC_PERIOD seconds (the kubelet's 10 s: 1,500 renewals a second at 15,000 nodes; the
# report says how many were sent and how many a node still waiting for its last one skipped),
# then 10% of them silent: detection delay after the grace period, and the unreachable taints' rate
# through the zone limiter (the nodes are spread over three zones). Its floor (`bench lifecycle
# --floor`, no controller: at each silent node's deadline a raw client makes the controller's two
# requests, a live Lease read and the status write, 32 at once) says what the API server allows.
#
# With LEASE_PERIOD=SECS every node's Lease is renewed every SECS during the storm runs (the
# kubelet's 10 s: 500 Lease events a second at 5,000 nodes) and ours runs its node lifecycle part
# too, as kube-controller-manager always does (`bench eviction --lease-period`).
#
# Environment: SIZES (nodes, default "1000"; "" for none), RUNS (3), TARGET (100), CONFIGS (all eight),
# LEASE_PERIOD (none),
# LC_SIZES ("1000"; "" for none), LC_RUNS (3), LC_CONFIGS (ours kcm-budget kcm-default floor),
# LC_PERIOD (10), LC_STEADY (600),
# OUT (docs/bench), RAW (where the JSON reports go; default under the cache directory).
# A report already in RAW is kept (a comparison stopped midway goes on where it stopped). A run the
# harness fails (an observer or the floor behind in the window) is kept in RAW/failed and run once
# more; after a second failure the comparison goes on without it, and the page ends with a list of
# such runs and why each failed (run again, the comparison retries only those).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES-1000}
RUNS=${RUNS:-3}
TARGET=${TARGET:-100}
LEASE_PERIOD=${LEASE_PERIOD:-}
leases=()
[[ -n $LEASE_PERIOD ]] && leases=(--lease-period "$LEASE_PERIOD")
CONFIGS=${CONFIGS:-floor floor-http1 floor-json ours ours-h2 ours-json kcm-budget kcm-default}
LC_SIZES=${LC_SIZES-1000}
LC_RUNS=${LC_RUNS:-3}
LC_CONFIGS=${LC_CONFIGS:-ours kcm-budget kcm-default floor}
LC_PERIOD=${LC_PERIOD:-10}
LC_STEADY=${LC_STEADY:-600}
OUT=${OUT:-docs/bench}
RAW=${RAW:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller/bench-compare/$(date -u +%Y%m%dT%H%M%SZ)}
T=${CARGO_TARGET_DIR:-target}/release
mkdir -p "$RAW" "$OUT"
rm -f "$RAW/failed/summary.md" # written again: the runs that failed before are retried
log() { printf 'bench-compare: %s\n' "$*" >&2; }

# One run of `bench "$@"` into $1.json. A run whose harness failed it (an observer or the floor
# behind in the window, a controller that exited) is kept in $RAW/failed/ and run once more on a
# fresh control plane. After a second failure the comparison goes on without that run: the
# reason is added to $RAW/failed/summary.md, which the page ends with, and returns 1.
measure() {
  local name=$1 attempt kept logs=()
  shift
  for attempt in 1 2; do
    if "$T/bench" "$@" >"$name.json.tmp" 2>"$name.log"; then
      mv "$name.json.tmp" "$name.json"
      return 0
    fi
    kept="$RAW/failed/$(basename "$name")-attempt$attempt.log"
    mkdir -p "$RAW/failed"
    mv "$name.log" "$kept"
    rm -f "$name.json.tmp"
    log "failed (attempt $attempt): see $kept"
    tail -3 "$kept" | cut -c1-300 >&2
    logs+=("$kept")
  done
  {
    printf -- '- `%s`, twice:' "$(basename "$name")"
    for attempt in 1 2; do
      kept=${logs[attempt - 1]}
      # The error's words without the report it carries, and the observer's lags if it had any.
      printf ' (%s) %s' "$attempt" "$(grep -m1 '^Error:' "$kept" | sed 's/^Error: //; s/: {.*//' | cut -c1-200)"
      grep -o '"canary_lag_s":{[^}]*}' "$kept" | head -1 | sed 's/^/ `/; s/$/`/' | tr -d '\n'
      printf ';'
    done
    printf '\n'
  } >>"$RAW/failed/summary.md"
  log "failed twice: not on the page; the reason is added to its end"
  return 1
}

for size in $SIZES; do
  for run in $(seq 1 "$RUNS"); do
    for config in $CONFIGS; do
      case $config in
        floor) args=(--floor --floor-wire protobuf --floor-http2) ;;
        floor-http1) args=(--floor --floor-wire protobuf) ;;
        floor-json) args=(--floor --floor-wire json) ;;
        floor-watch) args=(--floor --floor-wire protobuf --floor-http2 --floor-watch-pods) ;;
        ours) args=(--controller "$T/node-lifecycle-controller") ;;
        ours-h2) args=(--controller "$T/node-lifecycle-controller" -- --api-http2) ;;
        ours-json) args=(--controller "$T/node-lifecycle-controller" -- --kube-api-content-type=application/json) ;;
        ours-read-cache) args=(--controller "$T/node-lifecycle-controller" -- --eviction-node-read=cache) ;;
        ours-no-read) args=(--controller "$T/node-lifecycle-controller" -- --eviction-node-read=none) ;;
        ours-events-per-node) args=(--controller "$T/node-lifecycle-controller" -- --eviction-events=per-node) ;;
        ours-no-events) args=(--controller "$T/node-lifecycle-controller" -- --eviction-events=none) ;;
        kcm-budget) args=(--upstream -- --kube-api-qps=2000 --kube-api-burst=2000) ;;
        kcm-default) args=(--upstream) ;;
        *) log "unknown configuration $config"; exit 1 ;;
      esac
      name="$RAW/$size${LEASE_PERIOD:+-leases$LEASE_PERIOD}-$config-$run"
      if [[ -s $name.json ]]; then log "$name.json exists, kept"; continue; fi
      log "$size nodes, $config, run $run${LEASE_PERIOD:+, Leases renewed every $LEASE_PERIOD s}"
      measure "$name" eviction --nodes "$size" --pods 30 --target "$TARGET" "${leases[@]}" "${args[@]}" || true
    done
  done
done

for size in $LC_SIZES; do
  for run in $(seq 1 "$LC_RUNS"); do
    for config in $LC_CONFIGS; do
      case $config in
        ours) args=(--controller "$T/node-lifecycle-controller") ;;
        kcm-budget) args=(--upstream -- --kube-api-qps=2000 --kube-api-burst=2000) ;;
        kcm-default) args=(--upstream) ;;
        floor) args=(--floor) ;;
        *) log "unknown lifecycle configuration $config"; exit 1 ;;
      esac
      name="$RAW/lifecycle-$size-$config-$run"
      if [[ -s $name.json ]]; then log "$name.json exists, kept"; continue; fi
      log "lifecycle: $size nodes, $config, run $run"
      measure "$name" lifecycle --nodes "$size" --stop $((size / 10)) --lease-period "$LC_PERIOD" --steady "$LC_STEADY" "${args[@]}" || true
    done
  done
done

"$T/bench" compare --runs "$RAW" --out "$OUT" \
  --command "make bench-compare SIZES=\"$SIZES\" RUNS=$RUNS TARGET=$TARGET${LEASE_PERIOD:+ LEASE_PERIOD=$LEASE_PERIOD} LC_SIZES=\"$LC_SIZES\" LC_RUNS=$LC_RUNS LC_PERIOD=$LC_PERIOD LC_STEADY=$LC_STEADY (reports: $RAW)"
if [[ -s $RAW/failed/summary.md ]]; then
  {
    printf '\n### Runs the harness failed twice (not in the tables)\n\n'
    printf 'Each was run twice on a fresh control plane; both logs are in `%s/failed/`.\n\n' "$RAW"
    cat "$RAW/failed/summary.md"
  } >>"$OUT/compare.md"
  log "$(wc -l <"$RAW/failed/summary.md") run(s) failed the harness twice: listed at the end of $OUT/compare.md"
fi
if ! command -v rsvg-convert >/dev/null && [[ $(id -u) -eq 0 ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends librsvg2-bin >&2 || true
fi
if command -v rsvg-convert >/dev/null; then
  rsvg-convert -o "$OUT/compare.png" "$OUT/compare.svg"
else
  log "rsvg-convert missing (apt-get install librsvg2-bin): $OUT/compare.png not written"
fi
log "wrote $OUT/compare.md and $OUT/compare.svg (and .png); reports in $RAW"
