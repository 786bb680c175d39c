#!/usr/bin/env bash
# A release's artifacts, as .github/workflows/release.yml makes them, for this machine's
# architecture and unsigned (signing and provenance need the workflow's OIDC identity):
#
#   <dist>/node-lifecycle-controller-<version>-image-<arch>.tar   the image (docker save)
#   <dist>/node-lifecycle-controller-<version>.cdx.json           its SBOM (CycloneDX 1.5, the
#                                                                   binary's crates with versions,
#                                                                   licenses and checksums)
#   <dist>/node-lifecycle-controller-<version>.tgz                the chart (helm package)
#   <dist>/SHA256SUMS
#
#   scripts/release.sh [IMAGE] [DIST]     defaults: node-lifecycle-controller:dev, target/dist-artifacts
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-node-lifecycle-controller:dev}
DIST=${2:-${CARGO_TARGET_DIR:-target}/dist-artifacts}
CACHE="${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}"
CYCLONEDX_VERSION=0.5.9
log() { printf 'release: %s\n' "$*" >&2; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | sed -n 1p)
chart_version=$(sed -n 's/^version: //p' charts/node-lifecycle-controller/Chart.yaml)
if [[ $chart_version != "$version" ]]; then
  log "the chart's version ($chart_version) is not the crate's ($version)"
  exit 1
fi
arch=$(uname -m)
rm -rf "$DIST" && mkdir -p "$DIST"

scripts/image.sh "$IMAGE"
docker save "$IMAGE" -o "$DIST/node-lifecycle-controller-$version-image-$arch.tar"

bin=$(scripts/cargo-tool.sh cargo-cyclonedx "$CYCLONEDX_VERSION")
# The SBOM of what the image ships: the binary's crates for its target, without dev or build
# dependencies.
PATH="$bin:$PATH" cargo cyclonedx --manifest-path Cargo.toml --format json --spec-version 1.5 \
  --target "$(rustc -vV | sed -n 's/^host: //p')" --no-build-deps --override-filename "sbom" >&2
mv sbom.json "$DIST/node-lifecycle-controller-$version.cdx.json"
# cargo-cyclonedx writes one per workspace member: keep the binary's only.
git ls-files --others --exclude-standard -- '*sbom.json' | xargs -r rm -f

helm=$CACHE/tools/helm
[[ -x $helm ]] || helm=$(command -v helm) || { log "helm not found (scripts/build-controlplane.sh builds it)"; exit 1; }
"$helm" package charts/node-lifecycle-controller -d "$DIST" >&2

(cd "$DIST" && sha256sum -- *.tar *.json *.tgz >SHA256SUMS)
log "artifacts in $DIST:"
ls -l "$DIST" >&2
