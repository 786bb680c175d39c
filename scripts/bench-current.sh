#!/usr/bin/env bash
# docs/bench/compare.md and its chart: the current comparison, written by `bench compare` from the
# newest reports of each configuration kept under bench/results (which set each comes from, and
# why, in docs/bench/README.md). `make bench-compare` measures anew; this re-renders what is kept.
#
#   BENCH=path/to/bench scripts/bench-current.sh     (default: the release build's, else debug's)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${CARGO_TARGET_DIR:-target}
BENCH=${BENCH:-$( [[ -x $T/release/bench ]] && echo "$T/release/bench" || echo "$T/debug/bench")}
[[ -x $BENCH ]] || { echo "bench-current: no bench binary (cargo build -p nlc-bench --bin bench)" >&2; exit 1; }
R=bench/results
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
# Each link named after its path: sets may hold reports of the same name.
link() { for f in "$@"; do ln -s "$PWD/$f" "$runs/${f//\//_}"; done; }
# 5,000 × 30: ours, kube-controller-manager at our budget and the HTTP/1.1 floor, 2026-12-04's
# three interleaved rounds (the controller at b6795cc, with the skew fix).
link $R/fast-path-costs/5000-rounds-2/*.json
# kube-controller-manager at its defaults: paced by its own 20 requests/s, the same to the tenth of
# a second in every set; the 2026-12-02 matrix's runs.
link $R/fast-path-matrix/runs/5000-kcm-default-*.json
# 1,000 × 30 and the lifecycle workload: the 2026-12-02 matrix (build ac9e984).
link $R/fast-path-matrix/runs/1000-*.json $R/fast-path-matrix/runs/lifecycle-*.json
# 15,000 × 30: three interleaved rounds, 2026-12-05 (build d65633c) and 2026-12-06 (33c0738): ours
# over HTTP/1.1 and HTTP/2 and the HTTP/1.1 floor (three runs each), kube-controller-manager at
# our budget and at its defaults (three each; its third at defaults 2026-12-06 at 86f9eaa's
# bench); the runs the harness failed are in rounds/failed.
# The lifecycle workload at 15,000 nodes, Leases every 40 s, its window opened once the nodes'
# registration taints were gone: ours at 5b12b6b (2026-12-06, two runs),
# kube-controller-manager at our budget (2026-12-05 and -06, three runs) and the detection floor
# (the runs from before the bench waited for the taints, in lifecycle/unsettled, ours before
# b3b3bcc, in lifecycle/paced-removals, and ours' earlier builds of 2026-12-06, in
# lifecycle/earlier-builds, are not on the page: docs/bench/README.md says why).
link $R/scale-15000/rounds/*.json $R/scale-15000/lifecycle/*.json
"$BENCH" compare --runs "$runs" --out docs/bench \
  --command "scripts/bench-current.sh (reports: $R/fast-path-costs/5000-rounds-2, $R/fast-path-matrix/runs and $R/scale-15000; docs/bench/README.md says which runs are from which set)"
if command -v rsvg-convert >/dev/null; then
  rsvg-convert -o docs/bench/compare.png docs/bench/compare.svg
else
  echo "bench-current: rsvg-convert missing (apt-get install librsvg2-bin): docs/bench/compare.png not written" >&2
fi
