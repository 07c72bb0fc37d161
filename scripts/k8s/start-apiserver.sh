#!/usr/bin/env bash
# Starts etcd + kube-apiserver on 127.0.0.1 for the Kubernetes node-health tests, with a CA and
# serving cert (openssl), static bearer tokens and RBAC on; waits for /readyz; writes DIR/env.
# Run it again after stop-apiserver.sh --apiserver-only to restart only the API server (etcd and
# its data are kept, so the objects survive; DIR/pki/tokens.csv is re-read).
# Usage: bash scripts/k8s/start-apiserver.sh PATH/TO/kube-apiserver DIR
#   env: API_PORT (16443), ETCD_PORT (12379), ETCD_PEER_PORT (12380)
# DIR/env holds KUBE_URL, KUBE_CA, KUBE_ADMIN_TOKEN, KUBE_READER_TOKEN, KUBE_READER_TOKEN_B (both
# user "rankvisor", bound to get/watch nodes) and KUBE_NOBODY_TOKEN (user "nobody", no RBAC).
set -euo pipefail
APISERVER=${1:?usage: start-apiserver.sh PATH/TO/kube-apiserver DIR}
R=${2:?usage: start-apiserver.sh PATH/TO/kube-apiserver DIR}
API_PORT=${API_PORT:-16443}; ETCD_PORT=${ETCD_PORT:-12379}; ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
mkdir -p "$R/pki" "$R/logs"; R=$(cd "$R" && pwd)
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [ ! -f "$R/pki/tokens.csv" ]; then
  ( cd "$R/pki"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 -subj "/CN=rankvisor-test-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n" > ext.cnf
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 365 \
      -extfile ext.cnf 2>/dev/null
    # a second, unrelated CA: what "wrong CA" tests trust
    openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days 365 -subj "/CN=other-ca" 2>/dev/null
    A=$(openssl rand -hex 16); T=$(openssl rand -hex 16); B=$(openssl rand -hex 16); N=$(openssl rand -hex 16)
    # token,user,uid,"groups"
    { echo "$A,admin,1,\"system:masters\""; echo "$T,rankvisor,2"; echo "$B,rankvisor,2"; echo "$N,nobody,3"; } > tokens.csv.tmp
    mv tokens.csv.tmp tokens.csv
    cat > "$R/env" <<ENV
KUBE_URL=https://127.0.0.1:$API_PORT
KUBE_CA=$R/pki/ca.crt
KUBE_OTHER_CA=$R/pki/other-ca.crt
KUBE_ADMIN_TOKEN=$A
KUBE_READER_TOKEN=$T
KUBE_READER_TOKEN_B=$B
KUBE_NOBODY_TOKEN=$N
ENV
  )
fi
# shellcheck disable=SC1091
. "$R/env"
T0=$(date +%s%N)
if ! alive "$R/etcd.pid"; then
  rm -rf "$R/etcd-data" "$R/rbac.done"
  etcd --name test --data-dir "$R/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "test=http://127.0.0.1:$ETCD_PEER_PORT" > "$R/logs/etcd.log" 2>&1 &
  echo $! > "$R/etcd.pid"
fi
if ! alive "$R/apiserver.pid"; then
  "$APISERVER" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file="$R/pki/apiserver.crt" --tls-private-key-file="$R/pki/apiserver.key" \
    --token-auth-file="$R/pki/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$R/pki/sa.pub" \
    --service-account-signing-key-file="$R/pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    ${EXTRA_FLAGS:-} >> "$R/logs/apiserver.log" 2>&1 &
  echo $! > "$R/apiserver.pid"
fi
C=(curl -sS --cacert "$KUBE_CA" -H "Authorization: Bearer $KUBE_ADMIN_TOKEN")
ready=
for _ in $(seq 1 1200); do
  if "${C[@]}" "$KUBE_URL/readyz" 2>/dev/null | grep -q '^ok$'; then ready=1; break; fi
  alive "$R/apiserver.pid" || break
  sleep 0.1
done
if [ -z "$ready" ]; then
  echo "start-apiserver: NOT READY" >&2; tail -30 "$R/logs/apiserver.log" >&2; exit 1
fi
if [ ! -f "$R/rbac.done" ]; then
  J=(-H "Content-Type: application/json" -o /dev/null -w '%{http_code}')
  code=$("${C[@]}" "${J[@]}" -X POST "$KUBE_URL/apis/rbac.authorization.k8s.io/v1/clusterroles" -d \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"rankvisor-node-reader"},"rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","watch"]}]}')
  [ "$code" = 201 ] || { echo "start-apiserver: ClusterRole: HTTP $code" >&2; exit 1; }
  code=$("${C[@]}" "${J[@]}" -X POST "$KUBE_URL/apis/rbac.authorization.k8s.io/v1/clusterrolebindings" -d \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"rankvisor-node-reader"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rankvisor-node-reader"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"rankvisor"}]}')
  [ "$code" = 201 ] || { echo "start-apiserver: ClusterRoleBinding: HTTP $code" >&2; exit 1; }
  touch "$R/rbac.done"
fi
echo "start-apiserver: ready after $(( ($(date +%s%N) - T0) / 1000000 )) ms at $KUBE_URL (env: $R/env)" >&2
