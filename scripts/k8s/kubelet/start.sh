#!/usr/bin/env bash
# Starts a one-node Kubernetes v1.20.2 on loopback for tests/heavy/real_node.rs: etcd, kube-apiserver (the
# project's cached build), and a kubelet whose built-in dockershim runs pods on the local Docker
# engine. The node is named 127.0.0.1 (the kubelet rejects a loopback --node-ip but takes an IP given
# as --hostname-override as its InternalIP). Everything lives in DIR; stop.sh DIR undoes it and
# check-clean.sh DIR proves it did.
# Usage: bash scripts/k8s/kubelet/start.sh BIN_DIR APISERVER DIR
#   BIN_DIR from build.sh (kubelet, kubectl, pause); APISERVER from scripts/k8s/build-apiserver.sh
#   env: API_PORT (26443) ETCD_PORT (22379) ETCD_PEER_PORT (22380) KUBELET_PORT (20250; its healthz
#        is KUBELET_HEALTHZ_PORT, default KUBELET_PORT-2)
# Writes DIR/env: KUBECONFIG, KUBE_URL, KUBE_CA, KUBE_ADMIN_TOKEN, API_PORT, NODE, PAUSE_IMAGE.
# What stands in for the parts a real cluster has and this one has not:
# - no kube-proxy: a pod that calls the API runs with hostNetwork and KUBERNETES_SERVICE_HOST/PORT
#   set to the API server's loopback address (its certificate names 127.0.0.1);
# - no kube-controller-manager: this script creates what its controllers would (the `default`
#   service account, the `kube-root-ca.crt` config map that service-account volumes project);
# - no cluster DNS: the tests put peer addresses into hostAliases.
set -euo pipefail
BIN=${1:?usage: start.sh BIN_DIR APISERVER DIR}
APISERVER=${2:?usage: start.sh BIN_DIR APISERVER DIR}
R=${3:?usage: start.sh BIN_DIR APISERVER DIR}
API_PORT=${API_PORT:-26443}; ETCD_PORT=${ETCD_PORT:-22379}; ETCD_PEER_PORT=${ETCD_PEER_PORT:-22380}
KUBELET_PORT=${KUBELET_PORT:-20250}; KUBELET_HEALTHZ_PORT=${KUBELET_HEALTHZ_PORT:-$((KUBELET_PORT - 2))}
NODE=127.0.0.1
PAUSE_IMAGE=rankvisor-pause:3.2
D=$(cd "$(dirname "$0")" && pwd)
for f in "$BIN/kubelet" "$BIN/kubectl" "$BIN/pause" "$APISERVER"; do
  [ -x "$f" ] || { echo "start.sh: $f is not an executable (run scripts/k8s/kubelet/build.sh and scripts/k8s/build-apiserver.sh)" >&2; exit 1; }
done
mkdir -p "$R/pki" "$R/logs"; R=$(cd "$R" && pwd)
alive() { [ -f "$R/$1.pid" ] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }
t() { echo "[$(date +%T)] kubelet/start: $*" >&2; }
T0=$(date +%s%N); ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }

# One kubelet per machine: two would fight over the same kubepods cgroups and node name.
if other=$(pgrep -x kubelet); then
  for p in $other; do
    alive kubelet && [ "$p" = "$(cat "$R/kubelet.pid")" ] && continue
    echo "start.sh: another kubelet runs (pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-120)); refusing to start a second one" >&2
    exit 1
  done
fi

# The machine as found, for check-clean.sh (only on the first start in DIR).
[ -f "$R/before" ] || bash "$D/snapshot.sh" > "$R/before"

if [ ! -f "$R/pki/tokens.csv" ]; then
  ( cd "$R/pki"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 -subj "/CN=rankvisor-node-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n" > ext.cnf
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 365 \
      -extfile ext.cnf 2>/dev/null
    echo "$(openssl rand -hex 16),admin,1,\"system:masters\"" > tokens.csv.tmp && mv tokens.csv.tmp tokens.csv
  )
  A=$(cut -d, -f1 "$R/pki/tokens.csv")
  # one kubeconfig for the tests' kubectl and the kubelet (admin; the node authorizer is not on)
  cat > "$R/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: rankvisor-node
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$R/pki/ca.crt"}
users:
- name: admin
  user: {token: "$A"}
contexts:
- name: rankvisor-node
  context: {cluster: rankvisor-node, user: admin, namespace: default}
current-context: rankvisor-node
KC
  cat > "$R/env" <<ENV
KUBECONFIG=$R/kubeconfig
KUBE_URL=https://127.0.0.1:$API_PORT
KUBE_CA=$R/pki/ca.crt
KUBE_ADMIN_TOKEN=$A
API_PORT=$API_PORT
NODE=$NODE
PAUSE_IMAGE=$PAUSE_IMAGE
KUBECTL=$BIN/kubectl
ENV
fi
A=$(cut -d, -f1 "$R/pki/tokens.csv")
export KUBECONFIG=$R/kubeconfig
K=("$BIN/kubectl" --request-timeout=10s --cache-dir="$R/kubectl-cache")

if ! alive etcd; then
  rm -rf "$R/etcd-data"
  etcd --name node --data-dir "$R/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "node=http://127.0.0.1:$ETCD_PEER_PORT" > "$R/logs/etcd.log" 2>&1 &
  echo $! > "$R/etcd.pid"
fi
if ! alive apiserver; then
  # ServiceAccount admission on, with bound (projected) service-account token volumes: every pod
  # gets a token the kubelet requests for it (TokenRequest), the CA from kube-root-ca.crt and its
  # namespace at /var/run/secrets/kubernetes.io/serviceaccount, as on clusters since 1.21.
  "$APISERVER" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file="$R/pki/apiserver.crt" --tls-private-key-file="$R/pki/apiserver.key" \
    --token-auth-file="$R/pki/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$R/pki/sa.pub" \
    --service-account-signing-key-file="$R/pki/sa.key" \
    --feature-gates=BoundServiceAccountTokenVolume=true \
    --service-cluster-ip-range=10.96.0.0/24 \
    --endpoint-reconciler-type=none \
    --kubelet-preferred-address-types=InternalIP \
    >> "$R/logs/apiserver.log" 2>&1 &
  echo $! > "$R/apiserver.pid"
fi
C=(curl -sS --cacert "$R/pki/ca.crt" -H "Authorization: Bearer $A")
ready=
for _ in $(seq 1 1200); do
  if "${C[@]}" "https://127.0.0.1:$API_PORT/readyz" 2>/dev/null | grep -q '^ok$'; then ready=1; break; fi
  alive apiserver || break
  sleep 0.1
done
[ -n "$ready" ] || { t "API server NOT READY"; tail -30 "$R/logs/apiserver.log" >&2; exit 1; }
t "API server ready after $(ms) ms"

# What kube-controller-manager's service-account and root-CA publisher controllers would create.
"${K[@]}" get serviceaccount default >/dev/null 2>&1 || "${K[@]}" create serviceaccount default >/dev/null
"${K[@]}" get configmap kube-root-ca.crt >/dev/null 2>&1 || \
  "${K[@]}" create configmap kube-root-ca.crt --from-file=ca.crt="$R/pki/ca.crt" >/dev/null

# The pod sandbox image, FROM scratch (the static pause built with the kubelet).
if ! docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
  ctx=$(mktemp -d); cp "$BIN/pause" "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Dockerfile"
  DOCKER_BUILDKIT=0 docker build --network none -q -t "$PAUSE_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
fi

if ! alive kubelet; then
  mkdir -p "$R/kubelet" "$R/dockershim" "$R/volume-plugins"
  # Flags beyond the defaults, each because of this machine or to leave the host as it was:
  # --cgroup-driver: Docker's; --fail-swap-on=false; --image-gc-high-threshold=100: never delete the
  # locally built, unpullable images (nor anyone else's); --eviction-hard: a busy shared machine must
  # not evict test pods; --make-iptables-util-chains=false and --hairpin-mode=none: no KUBE-* iptables
  # chains and no bridge port changes on the host; the root, cert, dockershim and plugin directories
  # all inside DIR; servers on loopback only (--anonymous-auth with AlwaysAllow: local access only).
  "$BIN/kubelet" \
    --kubeconfig="$R/kubeconfig" \
    --register-node=true --hostname-override="$NODE" \
    --container-runtime=docker --docker-endpoint=unix:///var/run/docker.sock \
    --container-runtime-endpoint="unix://$R/dockershim.sock" \
    --experimental-dockershim-root-directory="$R/dockershim" \
    --pod-infra-container-image="$PAUSE_IMAGE" \
    --cgroup-driver="$(docker info --format '{{.CgroupDriver}}')" ${KUBELET_CGROUP_FLAGS:-} \
    --fail-swap-on=false \
    --root-dir="$R/kubelet" --cert-dir="$R/kubelet/pki" \
    --volume-plugin-dir="$R/volume-plugins" \
    --address=127.0.0.1 --port="$KUBELET_PORT" \
    --healthz-bind-address=127.0.0.1 --healthz-port="$KUBELET_HEALTHZ_PORT" \
    --read-only-port=0 \
    --anonymous-auth=true --authorization-mode=AlwaysAllow \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --eviction-hard='memory.available<1Mi' \
    --make-iptables-util-chains=false --hairpin-mode=none \
    --v="${KUBELET_V:-2}" >> "$R/logs/kubelet.log" 2>&1 &
  echo $! > "$R/kubelet.pid"
fi
for _ in $(seq 1 1200); do
  # the kubelet's own healthz first: a Node left Ready by an earlier kubelet would pass the second check
  if curl -s "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null | grep -q '^ok$' \
    && "${K[@]}" get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; then
    t "node $NODE Ready after $(ms) ms"; exit 0
  fi
  alive kubelet || { t "the kubelet died"; tail -40 "$R/logs/kubelet.log" >&2; exit 1; }
  sleep 0.1
done
t "node $NODE not Ready in 120 s"; tail -40 "$R/logs/kubelet.log" >&2; exit 1
