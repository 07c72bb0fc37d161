#!/usr/bin/env bash
# Stops what start.sh DIR started and undoes what the kubelet did to the host, also after a crash of
# the caller: deletes the pods through the kubelet (graceful), stops kubelet, API server and etcd by
# pid file, unmounts everything under DIR, removes the k8s_* containers and /var/log/pods entries of
# THIS cluster's pods (UIDs collected from the API server while it is up, and from the kubelet's
# pods directory), removes the empty kubepods cgroups and puts back any sysctl that differs from
# DIR/before. Idempotent. check-clean.sh DIR verifies the result.
# Usage: bash scripts/k8s/kubelet/stop.sh DIR
set -uo pipefail
R=${1:?usage: stop.sh DIR}
[ -d "$R" ] || exit 0
R=$(cd "$R" && pwd)
[ -f "$R/env" ] && . "$R/env"
export KUBECONFIG=$R/kubeconfig
K=("${KUBECTL:-kubectl}" --request-timeout=10s --cache-dir="$R/kubectl-cache")
alive() { [ -f "$R/$1.pid" ] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }
uids() {
  if alive apiserver; then
    "${K[@]}" get pods -A -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' 2>/dev/null >> "$R/pod-uids"
  fi
  ls -1 "$R/kubelet/pods" 2>/dev/null >> "$R/pod-uids"
  # Pods deleted during the run are gone from both; their log directories (<ns>_<name>_<uid>) and
  # containers remain until the kubelet's garbage collection. Only this cluster's kubelet ran since
  # start.sh's snapshot (start.sh refuses to start beside another), so what is new is ours.
  if [ -f "$R/before" ]; then
    for d in /var/log/pods/*; do
      [ -d "$d" ] && ! grep -qx "pod-logs ${d##*/}" "$R/before" && echo "${d##*_}" >> "$R/pod-uids"
    done
    for n in $(docker ps -a --format '{{.Names}}' | grep '^k8s_'); do
      grep -qx "container $n" "$R/before" || docker inspect -f '{{index .Config.Labels "io.kubernetes.pod.uid"}}' "$n" >> "$R/pod-uids"
    done
  fi
  true
}
stop() {
  if alive "$1"; then
    kill "$(cat "$R/$1.pid")"; for _ in $(seq 100); do alive "$1" || break; sleep 0.1; done
    alive "$1" && kill -9 "$(cat "$R/$1.pid")"
    echo "stop.sh: stopped $1 ($(cat "$R/$1.pid"))"
  fi
  rm -f "$R/$1.pid"
}
uids
if alive kubelet && alive apiserver; then   # the kubelet tears its pods down itself (graceful)
  timeout 40 "${K[@]}" delete pods -A --all --grace-period=1 --wait=true >/dev/null 2>&1 || true
fi
uids
stop kubelet; stop apiserver; stop etcd
# The kubelet bind-mounts its --root-dir onto itself (rshared), and pod volumes below it.
for _ in 1 2 3; do
  awk -v r="$R" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
done
# Containers and pod log directories of this cluster's pods only (never other k8s_* containers).
if [ -s "$R/pod-uids" ]; then
  for uid in $(sort -u "$R/pod-uids"); do
    for id in $(docker ps -aq --filter "label=io.kubernetes.pod.uid=$uid"); do
      n=$(docker inspect -f '{{.Name}}' "$id")
      case "$n" in /k8s_*) docker rm -f "$id" >/dev/null && echo "stop.sh: removed container $n";; esac
    done
    for d in /var/log/pods/*_"$uid"; do
      [ -d "$d" ] || continue
      for l in /var/log/containers/*.log; do [ -L "$l" ] && case "$(readlink "$l")" in "$d"/*) rm -f "$l";; esac; done
      rm -rf "$d"
    done
  done
fi
# Empty pod and QoS cgroups (rmdir removes only empty ones), unless some kubelet still runs.
if ! pgrep -x kubelet >/dev/null && [ -f "$R/before" ]; then
  for h in /sys/fs/cgroup/*/kubepods; do
    [ -d "$h" ] || continue
    grep -qx "cgroup $h" "$R/before" || find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
fi
# Files and directories new since the snapshot in the kubelet's hard-coded /var/lib/kubelet
# (device-plugins/kubelet.sock, DEPRECATION), deepest first; never anything that was there before.
if [ -f "$R/before" ] && ! pgrep -x kubelet >/dev/null; then
  find /var/lib/kubelet -depth 2>/dev/null | while read -r p; do
    grep -qxF "path $p" "$R/before" && continue
    if [ -d "$p" ] && [ ! -L "$p" ]; then rmdir "$p" 2>/dev/null; else rm -f "$p"; fi
  done
  # the kubelet creates the pod log directories themselves when missing
  for d in /var/log/pods /var/log/containers; do
    grep -qxF "path $d" "$R/before" || rmdir "$d" 2>/dev/null
  done
fi
# Host sysctls back to what start.sh found (the patched kubelet does not change them; belt and braces).
if [ -f "$R/before" ] && ! alive kubelet; then
  grep '^sysctl ' "$R/before" | cut -d' ' -f2 | while IFS== read -r k v; do
    [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || { sysctl -q -w "$k=$v" && echo "stop.sh: restored $k=$v"; }
  done
fi
true
