#!/usr/bin/env bash
# Try the controller on a kind cluster, with the same overlay the tests render and apply. kind
# cannot run on the development machine (no registry for its node image): run it where Docker and
# kind are installed. The image is the real Dockerfile's (scripts/image.sh builds it with local
# base images where no registry is reachable).
#
#   scripts/kind.sh up      create the cluster, build and load the image, install cert-manager
#                           and the controller (with the DefaultTolerationSeconds webhook)
#   scripts/kind.sh down    delete the cluster
#
# The cluster's kube-controller-manager runs without its node-lifecycle and taint-eviction
# controllers, and kube-apiserver without its DefaultTolerationSeconds plugin: ours replace them.
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-nlc}
IMAGE=${IMAGE:-node-lifecycle-controller:dev}
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-v1.19.1}

up() {
  cat <<KIND | kind create cluster --name "$CLUSTER" --config=-
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    kubeadmConfigPatches:
      - |
        kind: ClusterConfiguration
        controllerManager:
          extraArgs:
            - name: controllers
              value: "*,-node-lifecycle-controller,-taint-eviction-controller"
        apiServer:
          extraArgs:
            - name: disable-admission-plugins
              value: DefaultTolerationSeconds
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-a}
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-b}
KIND
  docker build -t "$IMAGE" .
  kind load docker-image "$IMAGE" --name "$CLUSTER"
  kubectl apply -f "https://github.com/cert-manager/cert-manager/releases/download/${CERT_MANAGER_VERSION}/cert-manager.yaml"
  kubectl -n cert-manager rollout status deploy/cert-manager-webhook --timeout=180s
  tmp=$(mktemp -d)
  cat >"$tmp/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(pwd)/manifests/overlays/webhook
images:
  - name: ghcr.io/example/node-lifecycle-controller
    newName: ${IMAGE%%:*}
    newTag: ${IMAGE##*:}
KUST
  kubectl apply --server-side -k "$tmp"
  kubectl -n node-lifecycle-controller rollout status deploy/node-lifecycle-controller --timeout=180s
  kubectl -n node-lifecycle-controller rollout status deploy/node-lifecycle-controller-webhook --timeout=180s
  echo "Try it: docker pause ${CLUSTER}-worker; kubectl get nodes -w; kubectl get events -A -w"
}

down() {
  kind delete cluster --name "$CLUSTER"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
