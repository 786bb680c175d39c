#!/usr/bin/env bash
# `cargo deny check`, offline: advisories, licenses, duplicate versions and sources (deny.toml).
# The advisory database is the RustSec snapshot vendored in third_party/advisory-db (CC0; its
# commit and date in SNAPSHOT): CI reaches no git host, so a new advisory reaches CI when the
# snapshot is refreshed (`scripts/deny.sh --refresh DIR` from a clone of rustsec/advisory-db).
# cargo-deny is installed (pinned) into the cache on first use (scripts/cargo-tool.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}"
VERSION=0.20.2
SNAP=third_party/advisory-db

if [[ ${1:-} == --refresh ]]; then
  src=${2:?usage: scripts/deny.sh --refresh PATH-TO-A-CLONE-OF-rustsec/advisory-db}
  [[ -d $src/crates && -f $src/LICENSE.txt ]] || { echo "deny: $src is not a clone of rustsec/advisory-db" >&2; exit 1; }
  rm -rf "$SNAP/crates"
  mkdir -p "$SNAP"
  cp -r "$src/crates" "$SNAP/"
  cp "$src/LICENSE.txt" "$SNAP/"
  printf 'source: https://github.com/rustsec/advisory-db\ncommit: %s\ndate: %s\n' \
    "$(git -C "$src" rev-parse HEAD)" "$(git -C "$src" log -1 --format=%cI)" >"$SNAP/SNAPSHOT"
  exit 0
fi

bin=$(scripts/cargo-tool.sh cargo-deny "$VERSION")

# cargo-deny opens the database as a git repository (for its date) under a directory named after
# the URL in deny.toml: make one from the snapshot, dated as the snapshot.
commit=$(sed -n 's/^commit: //p' "$SNAP/SNAPSHOT")
date=$(sed -n 's/^date: //p' "$SNAP/SNAPSHOT")
export NLC_ADVISORY_DBS="$CACHE/advisory-dbs"
db="$NLC_ADVISORY_DBS/advisory-db-3157b0e258782691"
if [[ $(cat "$NLC_ADVISORY_DBS/snapshot" 2>/dev/null || true) != "$commit" ]]; then
  rm -rf "$db"
  mkdir -p "$db"
  cp -r "$SNAP/crates" "$SNAP/LICENSE.txt" "$db/"
  git -C "$db" init -q
  git -C "$db" add -A
  GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date \
    git -C "$db" -c user.name=nlc -c user.email=nlc@localhost -c commit.gpgsign=false commit -qm "rustsec/advisory-db $commit"
  echo "$commit" >"$NLC_ADVISORY_DBS/snapshot"
fi

cargo fetch --locked >/dev/null
"$bin/cargo-deny" --offline --locked check --show-stats
