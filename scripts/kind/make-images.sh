#!/usr/bin/env bash
# Makes every image a kind node preloads, from the binaries of build-bins.sh, with docker import /
# docker build on local bases only, and packs them with kubeadm/kubelet/kubectl into a
# "kubernetes-server-linux-amd64.tar.gz" shaped the way `kind build node-image --type file` reads it.
set -euo pipefail
CACHE=${CACHE:?set by scripts/kind-image.sh}
BIN=$CACHE/bin
HERE=$(cd "$(dirname "$0")" && pwd)
K8S=${K8S:-v1.37.2}
OUT=$CACHE/k8s-tarball
t0=$(date +%s)
step() { printf '%s [%4ds] %s\n' "$(date +%T)" "$(( $(date +%s) - t0 ))" "$*"; }
PATHENV='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

# a distroless-like skeleton for the static Go binaries
skel=$(mktemp -d)
trap 'rm -rf "$skel"' EXIT
mkdir -p "$skel"/{etc/ssl/certs,tmp,usr/local/bin,var/run}
chmod 1777 "$skel/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$skel/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$skel/etc/group"
printf 'hosts: files dns\n' >"$skel/etc/nsswitch.conf"
cp /etc/ssl/certs/ca-certificates.crt "$skel/etc/ssl/certs/"

static_image() { # tag, binary source, path in image, extra --change args...
  local tag=$1 src=$2 dst=$3; shift 3
  local d; d=$(mktemp -d)
  cp -a "$skel/." "$d/"
  mkdir -p "$d/$(dirname "$dst")"
  install -m 0755 "$src" "$d/$dst"
  tar -C "$d" -c . | docker import --change "$PATHENV" "$@" - "$tag" >/dev/null
  rm -rf "$d"
  step "made $tag"
}

step "static images"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  static_image "registry.k8s.io/$c:$K8S" "$BIN/$c" "/usr/local/bin/$c"
done
static_image registry.k8s.io/etcd:3.7.0-0 "$BIN/etcd" /usr/local/bin/etcd
static_image registry.k8s.io/coredns/coredns:v1.14.6 "$BIN/coredns" /coredns --change 'ENTRYPOINT ["/coredns"]'
static_image registry.k8s.io/pause:3.10 "$BIN/pause" /pause --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535'

step "slim debian base (for iptables users: kube-proxy, kindnetd stand-in, local-path)"
if ! docker image inspect local/kind-slim:bookworm >/dev/null 2>&1; then
  tar -C "$CACHE/node-rootfs" -c \
    --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/locale --exclude=./usr/share/info \
    --exclude=./var/lib/apt/lists --exclude=./var/cache/apt --exclude=./usr/lib/systemd --exclude=./lib/systemd \
    --exclude=./usr/share/zoneinfo --exclude='./var/log/*' . \
    | docker import --change "$PATHENV" - local/kind-slim:bookworm >/dev/null
fi
ctx=$(mktemp -d)
install -m 0755 "$BIN/kube-proxy" "$ctx/kube-proxy"
install -m 0755 "$HERE/kindnetd-lite.sh" "$ctx/kindnetd"
if [[ -x $BIN/local-path-provisioner ]]; then install -m 0755 "$BIN/local-path-provisioner" "$ctx/local-path-provisioner"; else
  printf '#!/bin/sh\necho "local-path-provisioner was not built"; exec sleep infinity\n' >"$ctx/local-path-provisioner"; chmod 755 "$ctx/local-path-provisioner"; fi
printf 'FROM local/kind-slim:bookworm\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' >"$ctx/Dockerfile.kube-proxy"
printf 'FROM local/kind-slim:bookworm\nCOPY kindnetd /bin/kindnetd\nCMD ["/bin/kindnetd"]\n' >"$ctx/Dockerfile.kindnetd"
printf 'FROM local/kind-slim:bookworm\nCOPY local-path-provisioner /usr/local/bin/local-path-provisioner\nENTRYPOINT ["local-path-provisioner"]\n' >"$ctx/Dockerfile.lpp"
docker build -q -f "$ctx/Dockerfile.kube-proxy" -t "registry.k8s.io/kube-proxy:$K8S" "$ctx" >/dev/null
docker build -q -f "$ctx/Dockerfile.kindnetd" -t docker.io/kindest/kindnetd:v20260820-69b56db7 "$ctx" >/dev/null
docker build -q -f "$ctx/Dockerfile.lpp" -t docker.io/kindest/local-path-provisioner:v20260820-69b56db7 "$ctx" >/dev/null
docker tag local/kind-slim:bookworm docker.io/kindest/local-path-helper:v20260131-7181c60a
rm -rf "$ctx"
step "made kube-proxy, kindnetd (stand-in), local-path images"

step "the release-shaped tarball"
rm -rf "$OUT"; mkdir -p "$OUT/kubernetes/server/bin"
echo "$K8S" >"$OUT/kubernetes/version"
install -m 0755 "$BIN/kubeadm" "$BIN/kubelet" "$BIN/kubectl" "$OUT/kubernetes/server/bin/"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  docker save "registry.k8s.io/$c:$K8S" >"$OUT/kubernetes/server/bin/$c.tar"
done
# kind reads only four archives, and from each only the first image's tags (manifest.json) unless
# a "repositories" entry comes first: pack every other image into kube-proxy.tar, repositories first.
docker save "registry.k8s.io/kube-proxy:$K8S" registry.k8s.io/etcd:3.7.0-0 registry.k8s.io/coredns/coredns:v1.14.6 \
  registry.k8s.io/pause:3.10 docker.io/kindest/kindnetd:v20260820-69b56db7 \
  docker.io/kindest/local-path-provisioner:v20260820-69b56db7 docker.io/kindest/local-path-helper:v20260131-7181c60a \
  | python3 -c '
import sys, tarfile
src = tarfile.open(fileobj=sys.stdin.buffer, mode="r|")
members = []
import io
for m in src:
    data = src.extractfile(m).read() if m.isfile() else None
    members.append((m, data))
members.sort(key=lambda md: 0 if md[0].name == "repositories" else 1)
# docker writes familiar names ("kindest/kindnetd"); kind compares with "docker.io/kindest/kindnetd"
import json
def full(r):
    first = r.split("/")[0]
    if "/" not in r: return "docker.io/library/" + r
    return r if ("." in first or ":" in first or first == "localhost") else "docker.io/" + r
m, data = members[0]
repos = {full(k): v for k, v in json.loads(data).items()}
data = json.dumps(repos).encode()
m.size = len(data)
members[0] = (m, data)
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as dst:
    for m, data in members:
        dst.addfile(m, io.BytesIO(data) if data is not None else None)
' "$OUT/kubernetes/server/bin/kube-proxy.tar"
tar -C "$OUT" -c kubernetes | gzip -1 >"$CACHE/kubernetes-server-linux-amd64.tar.gz"
rm -rf "$OUT"
ls -la "$CACHE/kubernetes-server-linux-amd64.tar.gz"
step done
