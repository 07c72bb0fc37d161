#!/usr/bin/env bash
# Proves that stop.sh left the machine as start.sh found it: every process of DIR's cluster gone,
# nothing mounted under DIR, and no difference from DIR/before in what snapshot.sh lists (sysctls,
# k8s_* containers, kubelet mounts, kubepods cgroups, KUBE-* iptables rules, pod log directories).
# Exit 0 when clean; otherwise exit 1 and print each leftover.
# Usage: bash scripts/k8s/kubelet/check-clean.sh DIR
set -uo pipefail
R=${1:?usage: check-clean.sh DIR}
D=$(cd "$(dirname "$0")" && pwd)
[ -f "$R/before" ] || { echo "check-clean.sh: $R/before is missing (start.sh writes it)"; exit 1; }
left=()
for p in kubelet apiserver etcd; do
  if [ -f "$R/$p.pid" ] && kill -0 "$(cat "$R/$p.pid")" 2>/dev/null; then left+=("process $p (pid $(cat "$R/$p.pid")) still runs"); fi
done
while read -r m; do left+=("mount $m"); done < <(awk -v r="$R" 'index($2, r) == 1 {print $2}' /proc/mounts)
bash "$D/snapshot.sh" > "$R/after"
while read -r l; do left+=("new: $l"); done < <(comm -13 "$R/before" "$R/after")
while read -r l; do
  case "$l" in sysctl*) left+=("changed: $l (now: $(grep "^${l%%=*}=" "$R/after" | cut -d= -f2-))");; esac
done < <(comm -23 "$R/before" "$R/after")
if [ ${#left[@]} -gt 0 ]; then
  printf 'check-clean: left behind: %s\n' "${left[@]}"; exit 1
fi
echo "check-clean: clean ($(wc -l < "$R/after") lines of host state as before)"
