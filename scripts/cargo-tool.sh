#!/usr/bin/env bash
# Installs a cargo tool at a pinned version into the cache unless that version is there, and
# prints the directory of its binaries (put it first on PATH). A debug build: half the cold
# compile time, and fast enough for the one run per CI that each tool makes.
#
#   scripts/cargo-tool.sh CRATE VERSION
set -euo pipefail
crate=${1:?usage: scripts/cargo-tool.sh CRATE VERSION}
version=${2:?usage: scripts/cargo-tool.sh CRATE VERSION}
CACHE="${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}"
TOOLS="$CACHE/cargo-tools"
installed=$(cargo install --list --root "$TOOLS" 2>/dev/null || true)
if [[ $installed != *"$crate v$version:"* ]]; then
  echo "cargo-tool: installing $crate $version into $TOOLS" >&2
  cargo install "$crate" --version "$version" --locked --debug --root "$TOOLS" \
    --target-dir "$CACHE/cargo-tools-target" >&2
fi
echo "$TOOLS/bin"
