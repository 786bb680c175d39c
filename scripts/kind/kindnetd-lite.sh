#!/bin/bash
# A stand-in for kind's kindnetd (whose source is not served by the Go module proxy): the same job
# for a single-stack IPv4 cluster, in shell. Runs in kind's kindnet DaemonSet (hostNetwork,
# NET_ADMIN, /etc/cni/net.d mounted), with its ServiceAccount (list/watch nodes):
#   - writes this node's CNI config (ptp + host-local on the node's podCIDR + portmap), exactly the
#     config kindnetd writes;
#   - routes every other node's podCIDR via that node's InternalIP.
# No masquerade (nothing outside the docker network is reachable here anyway).
set -u
SA=/var/run/secrets/kubernetes.io/serviceaccount
API="https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
CONF=/etc/cni/net.d/10-kindnet.conflist
log() { echo "$(date +%FT%T) kindnetd-lite: $*"; }
log "HOST_IP=${HOST_IP:-} POD_SUBNET=${POD_SUBNET:-} API=$API"
while true; do
  if ! nodes=$(curl -sS --max-time 10 --cacert "$SA/ca.crt" -H "Authorization: Bearer $(cat "$SA/token")" "$API/api/v1/nodes"); then
    log "cannot list nodes yet"; sleep 2; continue
  fi
  while IFS=$'\t' read -r name ip cidrs; do
    [[ -n $cidrs && -n $ip ]] || continue
    if [[ $ip == "${HOST_IP:-}" ]]; then
      ranges=""
      for c in ${cidrs//,/ }; do ranges+="${ranges:+,}[{\"subnet\":\"$c\"}]"; done
      want=$(printf '{"cniVersion":"0.3.1","name":"kindnet","plugins":[{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","routes":[{"dst":"0.0.0.0/0"}],"ranges":[%s]}},{"type":"portmap","capabilities":{"portMappings":true}}]}\n' "$ranges")
      if [[ ! -f $CONF || $(cat "$CONF") != "$want" ]]; then
        printf '%s\n' "$want" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF" && log "wrote $CONF for $cidrs"
      fi
    else
      for c in ${cidrs//,/ }; do
        if [[ $(ip route show "$c") != *"via $ip "* ]]; then
          ip route replace "$c" via "$ip" && log "route $c via $ip ($name)"
        fi
      done
    fi
  done < <(jq -r '.items[] | [.metadata.name, ([.status.addresses[]? | select(.type=="InternalIP") | .address | select(test(":")|not)][0] // ""), ((.spec.podCIDRs // []) | map(select(test(":")|not)) | join(","))] | @tsv' <<<"$nodes")
  sleep 10
done
