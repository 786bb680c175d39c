# Sourced by scripts/build-controlplane.sh and scripts/e2e-upstream.sh: what a throwaway module
# needs to build k8s.io/kubernetes@VERSION's packages from the Go module proxy.

# `go mod edit` arguments: require k8s.io/kubernetes@$1 and replace each staging module that its
# go.mod ($2) points at ./staging with the published v0.X.Y of the same release. Fails when the
# go.mod names none.
k8s_module_edits() {
  local ver=$1 modfile=$2 staging_ver="v0.${1#v1.}" m n=0
  printf '%s\n' "-require=k8s.io/kubernetes@$ver"
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
    printf '%s\n' "-replace=$m=$m@$staging_ver"
    n=$((n + 1))
  done
  [[ $n -gt 0 ]]
}

# `-ldflags` for a stripped build stamped with version $1, as the release's own builds stamp it.
k8s_ldflags() {
  local ver=$1 minor=${1#v1.} ld="-s -w" pkg
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s\n' "$ld"
}
