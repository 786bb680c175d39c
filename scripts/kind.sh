#!/usr/bin/env bash
# Try the controller on a kind cluster: one control plane and two workers in two zones, the
# project's image built from the real Dockerfile and loaded, the controller and the webhook
# installed with the Helm chart (the webhook's certificate made here with openssl). The same
# path `make e2e-kind` tests (tests/kind/main.rs).
#
#   scripts/kind.sh up      create the cluster and install
#   scripts/kind.sh down    delete the cluster
#
# Settings (environment): CLUSTER (nlc), IMAGE (node-lifecycle-controller:dev), BUILD_IMAGE (1:
# build IMAGE with scripts/image.sh first; 0: use it as it is), NODE_IMAGE (the kind node image;
# default: scripts/kind-image.sh's), GRACE (20s: --node-monitor-grace-period and
# --node-startup-grace-period, short so that the demo takes seconds; upstream's default is 50s),
# VALUES (a Helm values file added to the install), KUBECONFIG (where kind writes the cluster's
# credentials, as kind does), APISERVER_DEFAULT_TOLERATIONS (on; off: kube-apiserver runs without
# its DefaultTolerationSeconds plugin, so the webhook alone adds the 300 s defaults, on CREATE and
# UPDATE: the cluster of `make e2e-upstream`). `make e2e-kind` runs exactly this `up` and `down`.
#
# The node image: kindest/node from Docker Hub where a registry is reachable, else built here
# from the package registries (scripts/kind-image.sh, cached). kube-controller-manager runs
# without its node-lifecycle and taint-eviction controllers (kubeadm's own value, minus those
# two: `*` alone drops bootstrapsigner and tokencleaner and workers cannot join), and by default
# kube-apiserver keeps its DefaultTolerationSeconds (a webhook outage degrades to 300 s).
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-nlc}
IMAGE=${IMAGE:-node-lifecycle-controller:dev}
BUILD_IMAGE=${BUILD_IMAGE:-1}
GRACE=${GRACE:-20s}
VALUES=${VALUES:-}
APISERVER_DEFAULT_TOLERATIONS=${APISERVER_DEFAULT_TOLERATIONS:-on}
CACHE_ROOT=${NLC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller}
export PATH=$CACHE_ROOT/kind/bin:$CACHE_ROOT/tools:$PATH
NS=node-lifecycle-controller
RELEASE=nlc
FULLNAME=nlc-node-lifecycle-controller

# Runs a noisy command quietly; its output is shown when it fails.
quiet() { local o; o=$("$@" 2>&1) || { printf '%s\n' "$o" >&2; return 1; }; }

up() {
  local node_image=${NODE_IMAGE:-}
  [[ -n $node_image ]] || node_image=$(scripts/kind-image.sh | tail -1)
  scripts/build-controlplane.sh >/dev/null # helm and kubectl, as the tests use them
  local apiserver=''
  case $APISERVER_DEFAULT_TOLERATIONS in
    on) ;;
    off) apiserver='
        apiServer:
          extraArgs:
            - name: disable-admission-plugins
              value: DefaultTolerationSeconds' ;;
    *) echo "APISERVER_DEFAULT_TOLERATIONS: on or off, not $APISERVER_DEFAULT_TOLERATIONS" >&2; exit 2 ;;
  esac
  cat <<KIND | kind create cluster --name "$CLUSTER" --image "$node_image" --config=-
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
nodes:
  - role: control-plane
    kubeadmConfigPatches:
      - |
        kind: ClusterConfiguration
        controllerManager:
          extraArgs:
            - name: controllers
              value: "*,bootstrapsigner,tokencleaner,-node-lifecycle-controller,-taint-eviction-controller"$apiserver
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-a}
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-b}
KIND
  [[ $BUILD_IMAGE == 0 ]] || scripts/image.sh "$IMAGE"
  kind load docker-image "$IMAGE" --name "$CLUSTER"
  local tmp; tmp=$(mktemp -d)
  local svc=$FULLNAME-webhook.$NS.svc
  quiet openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=nlc-kind-ca" \
    -keyout "$tmp/ca.key" -out "$tmp/ca.crt"
  # The Common Name holds at most 64 characters; the Service name is in subjectAltName.
  quiet openssl req -newkey rsa:2048 -nodes -subj "/CN=nlc-webhook" -keyout "$tmp/tls.key" -out "$tmp/tls.csr"
  printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\n' "$svc" >"$tmp/ext"
  quiet openssl x509 -req -in "$tmp/tls.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" -CAcreateserial -days 365 \
    -extfile "$tmp/ext" -out "$tmp/tls.crt"
  kubectl create namespace "$NS"
  kubectl -n "$NS" create secret tls "$FULLNAME-webhook-tls" --cert="$tmp/tls.crt" --key="$tmp/tls.key"
  local values=()
  [[ -z $VALUES ]] || values=(-f "$VALUES")
  helm install "$RELEASE" charts/node-lifecycle-controller --namespace "$NS" "${values[@]}" \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
    --set-string controller.flags.node-monitor-grace-period="$GRACE" \
    --set-string controller.flags.node-startup-grace-period="$GRACE" \
    --set webhook.enabled=true --set webhook.certManager.enabled=false \
    --set webhook.tls.caBundle="$(base64 -w0 <"$tmp/ca.crt")"
  rm -rf "$tmp"
  kubectl -n "$NS" rollout status "deploy/$FULLNAME" --timeout=180s
  kubectl -n "$NS" rollout status "deploy/$FULLNAME-webhook" --timeout=180s
  kubectl -n kube-system rollout status deploy/coredns --timeout=180s
  echo "Try it: docker pause ${CLUSTER}-worker; kubectl get nodes -w; kubectl nlc status -w (kubectl-nlc on PATH)"
}

down() {
  kind delete cluster --name "$CLUSTER"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
