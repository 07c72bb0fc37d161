#!/usr/bin/env bash
# Prints, one sorted line each, the host state a kubelet can change: the sysctls it knows, `k8s_*`
# containers, mounts of kubelet directories, kubepods cgroups, KUBE-* iptables rules and pod log
# directories. start.sh keeps the output from before the start; check-clean.sh compares.
set -uo pipefail
{
  for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys \
    kernel.keys.root_maxbytes net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables; do
    v=$(sysctl -n "$k" 2>/dev/null) && echo "sysctl $k=$v"
  done
  docker ps -a --format '{{.Names}}' 2>/dev/null | grep '^k8s_' | sed 's/^/container /'
  awk '$2 ~ /kubelet|kubernetes\.io~/ {print "mount " $2}' /proc/mounts
  for h in /sys/fs/cgroup/*/kubepods; do [ -d "$h" ] && find "$h" -type d | sed 's/^/cgroup /'; done
  for s in iptables-save iptables-legacy-save ip6tables-save ip6tables-legacy-save; do
    command -v "$s" >/dev/null 2>&1 && "$s" 2>/dev/null | grep 'KUBE-' | sed "s/^/$s /"
  done
  # the device-plugin manager's socket directory is hard-coded, whatever --root-dir says;
  # kubectl's discovery cache is per user unless --cache-dir (the harness passes one)
  find /var/lib/kubelet "${HOME:-/root}/.kube" 2>/dev/null | sed 's/^/path /'
  for d in /var/log/pods /var/log/containers; do [ -d "$d" ] && echo "path $d"; done
  ls -1 /var/log/pods 2>/dev/null | sed 's/^/pod-logs /'
  ls -1 /var/log/containers 2>/dev/null | sed 's/^/container-logs /'
  true
} | sort
exit 0
