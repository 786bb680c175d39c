#!/usr/bin/env bash
# Builds every binary a kind node image needs from the Go module proxy (no GitHub, no registry),
# sharing the Go build and module caches with scripts/build-controlplane.sh (its kube-apiserver
# and kube-controller-manager packages are compiled once). The recipe: ../../docs/kind.md.
# Output: $OUT/{kind,kubeadm,kubelet,kubectl,kube-*,etcd,coredns,containerd,ctr,containerd-shim-runc-v2,runc,crictl,cni/*,pause}
set -euo pipefail
command -v go >/dev/null || { echo "Go 1.26 must be on PATH" >&2; exit 1; }
CACHE=${CACHE:?set by scripts/kind-image.sh}
OUT=${OUT:-$CACHE/bin}
SRC=${SRC:-$CACHE/src}
K8S=${K8S:-v1.37.2}
KIND=${KIND:-v0.33.0}
ETCD=${ETCD:-v3.7.0}
COREDNS=${COREDNS:-v1.14.6}
CONTAINERD=${CONTAINERD:-v2.3.4}
RUNC=${RUNC:-v1.4.3}
CRICTL=${CRICTL:-v1.37.0}
CNI=${CNI:-v1.9.1}
mkdir -p "$OUT/cni" "$SRC"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=${GOTOOLCHAIN:-local}
LPP=${LPP:-v0.0.30}
t0=$(date +%s)
step() { printf '%s [%4ds] %s\n' "$(date +%T)" "$(( $(date +%s) - t0 ))" "$*"; }

# throwaway module: mod DIR MODULE-REQUIRE... ; tools listed in TOOLS
mkmod() { # dir, then lines for go.mod body
  local dir=$1; shift
  mkdir -p "$dir"
  printf 'module local.invalid/%s\n\ngo 1.26.0\n\n%s\n' "$(basename "$dir")" "$*" >"$dir/go.mod"
  (cd "$dir" && go mod tidy)
}

step "kind $KIND"
[[ -x $OUT/kind ]] || GOBIN=$OUT go install -trimpath -ldflags "-s -w" sigs.k8s.io/kind@$KIND

step "kubernetes $K8S"
if [[ ! -x $OUT/kube-proxy ]]; then
  gomod=$(go mod download -json k8s.io/kubernetes@$K8S | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  sv="v0.${K8S#v1.}"
  repl=$(grep -E '^\s*k8s.io/[^ ]+ => ./staging/' "$gomod" | awk -v sv="$sv" '{print "\t" $1 " => " $1 " " sv}' | sort -u)
  cmds="kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy"
  tools=$(for c in $cmds; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$c"; done)
  mkmod "$SRC/k8s" "require k8s.io/kubernetes $K8S

replace (
$repl
)

tool (
$tools
)"
  ldf="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $p.gitVersion=$K8S -X $p.gitMajor=1 -X $p.gitMinor=$(cut -d. -f2 <<<"$K8S") -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$SRC/k8s" && go build -trimpath -ldflags "$ldf" -o "$OUT/" $(for c in $cmds; do echo k8s.io/kubernetes/cmd/$c; done))
fi

step "etcd $ETCD"
if [[ ! -x $OUT/etcd ]]; then
  mkmod "$SRC/etcd" "require go.etcd.io/etcd/server/v3 $ETCD

tool go.etcd.io/etcd/server/v3"
  (cd "$SRC/etcd" && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3)
fi

step "coredns $COREDNS"
if [[ ! -x $OUT/coredns ]]; then
  mkmod "$SRC/coredns" "require github.com/coredns/coredns $COREDNS

tool github.com/coredns/coredns"
  (cd "$SRC/coredns" && go build -trimpath -ldflags "-s -w" -o "$OUT/coredns" github.com/coredns/coredns)
fi

step "containerd $CONTAINERD"
if [[ ! -x $OUT/containerd-shim-runc-v2 ]]; then
  c=github.com/containerd/containerd/v2
  mkmod "$SRC/containerd" "require $c $CONTAINERD

tool (
	$c/cmd/containerd
	$c/cmd/ctr
	$c/cmd/containerd-shim-runc-v2
)"
  (cd "$SRC/containerd" && go build -trimpath -tags "no_aufs no_zfs no_btrfs no_devmapper" \
    -ldflags "-s -w -X $c/version.Version=$CONTAINERD -X $c/version.Package=github.com/containerd/containerd/v2" \
    -o "$OUT/" $c/cmd/containerd $c/cmd/ctr $c/cmd/containerd-shim-runc-v2)
fi

step "runc $RUNC (cgo + libseccomp)"
if [[ ! -x $OUT/runc ]]; then
  mkmod "$SRC/runc" "require github.com/opencontainers/runc $RUNC

tool github.com/opencontainers/runc"
  (cd "$SRC/runc" && CGO_ENABLED=1 go build -trimpath -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w -X main.version=${RUNC#v}" -o "$OUT/runc" github.com/opencontainers/runc)
fi

step "crictl $CRICTL"
if [[ ! -x $OUT/crictl ]]; then
  mkmod "$SRC/crictl" "require sigs.k8s.io/cri-tools $CRICTL

tool sigs.k8s.io/cri-tools/cmd/crictl"
  (cd "$SRC/crictl" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL" -o "$OUT/crictl" sigs.k8s.io/cri-tools/cmd/crictl)
fi

step "cni plugins $CNI"
if [[ ! -x $OUT/cni/portmap ]]; then
  p=github.com/containernetworking/plugins
  mkmod "$SRC/cni" "require $p $CNI

tool (
	$p/plugins/ipam/host-local
	$p/plugins/main/loopback
	$p/plugins/main/ptp
	$p/plugins/meta/portmap
)"
  (cd "$SRC/cni" && go build -trimpath -ldflags "-s -w" -o "$OUT/cni/" $p/plugins/ipam/host-local $p/plugins/main/loopback $p/plugins/main/ptp $p/plugins/meta/portmap)
fi

step "pause (C, static)"
if [[ ! -x $OUT/pause ]]; then
  kdir=$(go mod download -json k8s.io/kubernetes@$K8S | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  gcc -Os -Wall -Werror -static -DVERSION=v3.10-kindlab -o "$OUT/pause" "$kdir/build/pause/linux/pause.c"
  strip "$OUT/pause"
fi
step "local-path-provisioner $LPP"
if [[ ! -x $OUT/local-path-provisioner ]]; then
  mkmod "$SRC/lpp" "require github.com/rancher/local-path-provisioner $LPP

tool github.com/rancher/local-path-provisioner"
  (cd "$SRC/lpp" && go build -trimpath -ldflags "-s -w -X main.VERSION=$LPP" -o "$OUT/local-path-provisioner" github.com/rancher/local-path-provisioner)
fi
step "done"
