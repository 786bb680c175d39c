#!/usr/bin/env bash
# Assembles kind's base image (images/base/Dockerfile of kind $KIND) as a directory, without docker
# build and without any registry: a bookworm rootfs (debootstrap) + kind's own files (from the
# sigs.k8s.io/kind module zip) + containerd/runc/crictl/CNI built by build-bins.sh.
# Then imports it as $BASE_IMAGE.
set -euo pipefail
command -v go >/dev/null || { echo "Go 1.26 must be on PATH" >&2; exit 1; }
CACHE=${CACHE:?set by scripts/kind-image.sh}
BIN=$CACHE/bin
KIND=${KIND:-v0.33.0}
BASE_IMAGE=${BASE_IMAGE:-local/kind-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PKGS=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,e2fsprogs,bash,ca-certificates,curl,jq,procps,mawk
t0=$(date +%s)
step() { printf '%s [%4ds] %s\n' "$(date +%T)" "$(( $(date +%s) - t0 ))" "$*"; }

R=$CACHE/node-rootfs
if [[ ! -x $R/lib/systemd/systemd ]]; then
  step "debootstrap bookworm + kind's packages"
  rm -rf "$R.partial"; mkdir -p "$R.partial"
  debootstrap --variant=minbase --include=$PKGS bookworm "$R.partial" "$MIRROR"
  rm -rf "$R"; mv "$R.partial" "$R"
fi

KSRC=$(go mod download -json sigs.k8s.io/kind@$KIND | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/images/base/files
B=$CACHE/base-rootfs
step "copy rootfs"
rm -rf "$B"; cp -a "$R" "$B"

step "kind's files"
install -m 0755 "$KSRC"/usr/local/bin/* "$B/usr/local/bin/"
mkdir -p "$B/kind/bin" "$B/LICENSES" "$B/etc/containerd" "$B/etc/systemd/system/kubelet.service.d"
install -m 0644 "$KSRC"/kind/README.txt "$B/kind/"
install -m 0755 "$KSRC"/kind/bin/* "$B/kind/bin/"
install -m 0644 "$KSRC"/LICENSES/* "$B/LICENSES/"
install -m 0644 "$KSRC"/etc/crictl.yaml "$B/etc/"
install -m 0644 "$KSRC"/etc/containerd/* "$B/etc/containerd/"
install -m 0644 "$KSRC"/etc/default/* "$B/etc/default/"
install -m 0644 "$KSRC"/etc/sysctl.d/* "$B/etc/sysctl.d/"
install -m 0644 "$KSRC"/etc/systemd/system/*.service "$KSRC"/etc/systemd/system/*.slice "$B/etc/systemd/system/"
install -m 0644 "$KSRC"/etc/systemd/system/kubelet.service.d/* "$B/etc/systemd/system/kubelet.service.d/"
chmod 755 "$B/kind" "$B/kind/bin"

# This host has no CAP_SYS_RESOURCE: containerd must not lower oom_score_adj below its own.
sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "$B/etc/containerd/config.toml"
grep -q 'restrict_oom_score_adj = true' "$B/etc/containerd/config.toml"

step "the Dockerfile's RUN steps, in a chroot"
chroot "$B" /bin/sh -euc '
find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete
rm -f /lib/systemd/system/multi-user.target.wants/*
rm -f /etc/systemd/system/*.wants/*
rm -f /lib/systemd/system/local-fs.target.wants/*
rm -f /lib/systemd/system/sockets.target.wants/*udev*
rm -f /lib/systemd/system/sockets.target.wants/*initctl*
rm -f /lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> /etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
'

step "containerd, runc, crictl, CNI plugins"
install -m 0755 "$BIN"/containerd "$BIN"/ctr "$BIN"/containerd-shim-runc-v2 "$BIN"/crictl "$B/usr/local/bin/"
install -m 0755 "$BIN"/runc "$B/usr/local/sbin/runc"
mkdir -p "$B/opt/cni/bin"
install -m 0755 "$BIN"/cni/* "$B/opt/cni/bin/"
chroot "$B" /bin/sh -euc '
ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer| length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" | jq "del(.process.rlimits)" > /etc/containerd/cri-base.json
containerd --version; runc --version | sed -n 1p; crictl --version'

step "clean up (as clean-install does)"
rm -rf "$B"/var/cache/debconf/* "$B"/var/lib/apt/lists/* "$B"/var/cache/apt/*.bin "$B"/var/log/* "$B"/tmp/* "$B"/var/tmp/* \
  "$B"/usr/share/doc/* "$B"/usr/share/doc-base/* "$B"/usr/share/man/* "$B"/usr/share/locale/*
du -sh "$B"

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  step "docker import $BASE_IMAGE"
  tar -C "$B" -c . | docker import \
    --change 'ENV container=docker' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    - local/kind-base-import:tmp
  # docker 20.10's import knows no STOPSIGNAL: systemd exits on SIGRTMIN+3 (SIGTERM re-executes it)
  printf 'FROM local/kind-base-import:tmp\nSTOPSIGNAL SIGRTMIN+3\n' | docker build -q -t "$BASE_IMAGE" - >/dev/null
  docker rmi local/kind-base-import:tmp >/dev/null
  docker image inspect --format '{{.Size}}' "$BASE_IMAGE"
fi
step done
