#!/usr/bin/env bash
# Builds the one-node cluster's binaries for tests/heavy/real_node.rs: kubelet (with its built-in dockershim)
# and kubectl v1.20.2 from Debian 12's "kubernetes" source package (the same source and Go 1.19 as
# scripts/k8s/build-apiserver.sh), plus the static `pause` of the pod sandbox image, and caches them
# OUTSIDE the repository in $CACHE/k8s-node-1.20.2-<hash of this script>/{kubelet,kubectl,pause}.
# A cached build is a no-op. Prints that directory on the last line of stdout.
# Cold: about 8 min on 2 cores. Nothing fetched is committed; the patches are the sed steps below.
# Usage: bash scripts/k8s/kubelet/build.sh
#   env: RANKVISOR_CACHE (default /var/cache/rankvisor)
#        RANKVISOR_KEEP_GO_CACHE=1 keeps the Go build cache ($CACHE/k8s-node-gocache, ~2.5 GB) so that
#        an edit of this recipe rebuilds in well under a minute instead of 8.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
CACHE=${RANKVISOR_CACHE:-/var/cache/rankvisor}
HASH=$(sha256sum "$SELF" | cut -c1-12)
OUT="$CACHE/k8s-node-1.20.2-$HASH"
VERSION=1.20.5+really1.20.2-1.1+deb12u1
t() { echo "[$(date +%T)] kubelet/build: $*" >&2; }
apt_install() {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 "$@" >/dev/null
}

# Runtime tools of start.sh/stop.sh, also needed when the binaries come from a cache volume.
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -x /bin/busybox ] && ! ldd /bin/busybox 2>&1 | grep -q '=>' || need+=(busybox-static)

if [ -x "$OUT/kubelet" ] && [ -x "$OUT/kubectl" ] && [ -x "$OUT/pause" ]; then
  [ ${#need[@]} -eq 0 ] || { t "installing ${need[*]}"; apt_install "${need[@]}"; }
  echo "$OUT"; exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.build-node.lock"   # one build at a time per cache; a second caller waits
flock 9
if [ -x "$OUT/kubelet" ] && [ -x "$OUT/kubectl" ] && [ -x "$OUT/pause" ]; then echo "$OUT"; exit 0; fi

W="$CACHE/build-node-$HASH"
rm -rf "$W"; mkdir -p "$W/apt/lists/partial" "$W/apt/parts"; cd "$W"
t "apt-get install (go, etcd, rsync, gcc, busybox-static)"
apt_install golang-go etcd-server etcd-client rsync openssl curl dpkg-dev gcc libc6-dev busybox-static \
  golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
# deb-src list derived from the machine's own Debian source entry, in a private apt state dir
sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > apt/parts/src.sources
AO=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$W/apt/parts" -o Dir::State::Lists="$W/apt/lists")
t "apt-get source kubernetes=$VERSION"
apt-get "${AO[@]}" update -q >/dev/null
apt-get "${AO[@]}" source -q "kubernetes=$VERSION" >/dev/null 2>&1
cd kubernetes-1.20.5+really1.20.2
# Go 1.19 needs reflect2 >= 1.0.2 (the vendored 1.0.1 crashes on Go >= 1.18): Debian's newer copies.
for d in github.com/modern-go/reflect2 github.com/json-iterator/go; do
  rm -rf "vendor/$d"; cp -rL "/usr/share/gocode/src/$d" "vendor/$d"
done

# patch() FILE SED_EXPR MARKER: applies a one-line sed and fails the build if MARKER is not there
# afterwards (a changed source must break the recipe loudly, never build an unpatched kubelet).
patch() {
  sed -i "$2" "$1"
  grep -q "$3" "$1" || { t "patch did not apply to $1 ($3)"; exit 1; }
}
# Patch 1 (required on hosts without CAP_SYS_RESOURCE, e.g. Firecracker VMs whose root has bit 24
# clear in CapBnd): no process may LOWER its oom_score_adj below 0 there, and runc then fails every
# pod sandbox ("can't get final child's PID from pipe: EOF") because dockershim hard-codes
# OomScoreAdj -998 for it, and every Guaranteed container (-997). The sandbox gets 0 and container
# scores are clamped at >= 0: only the OOM killer's preference changes, nothing rankvisor observes.
patch pkg/kubelet/dockershim/docker_sandbox.go \
  's/^\tdefaultSandboxOOMAdj int = -998$/\tdefaultSandboxOOMAdj int = 0 \/\/ rankvisor patch 1: was -998/' \
  'rankvisor patch 1'
patch pkg/kubelet/kuberuntime/kuberuntime_container_linux.go \
  's/^\tlc.Resources.OomScoreAdj = oomScoreAdj$/\tif oomScoreAdj < 0 { oomScoreAdj = 0 } \/\/ rankvisor patch 1: clamp\n\tlc.Resources.OomScoreAdj = oomScoreAdj/' \
  'rankvisor patch 1: clamp'
# Patch 2 (the test node is the developer's or CI's own machine): the kubelet rewrites host sysctls
# at start (vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1,
# kernel.keys.root_max*) unless --protect-kernel-defaults, which instead refuses to start when they
# differ. With the patch it only logs the difference ("warn", a mode the source has but never
# selects). The noop network plugin's bridge-nf-call-ip(6)tables=1 (for kube-proxy, absent here)
# is skipped too. tests/cluster checks after every run that no sysctl changed.
patch pkg/kubelet/cm/container_manager_linux.go \
  's/^\tb := KernelTunableModify$/\tb := KernelTunableWarn \/\/ rankvisor patch 2: leave host sysctls alone/' \
  'rankvisor patch 2'
patch pkg/kubelet/dockershim/network/plugins.go \
  's/^\tutilexec.New().Command("modprobe", "br-netfilter").CombinedOutput()$/\tif true { return nil } \/\/ rankvisor patch 2: no modprobe, no bridge-nf-call sysctls\n&/' \
  'rankvisor patch 2: no modprobe'
grep -n 'rankvisor patch' pkg/kubelet/dockershim/docker_sandbox.go pkg/kubelet/kuberuntime/kuberuntime_container_linux.go \
  pkg/kubelet/cm/container_manager_linux.go pkg/kubelet/dockershim/network/plugins.go >&2

t "pause (static gcc)"
mkdir -p "$OUT.tmp"
gcc -Os -Wall -Werror -static -DVERSION=v3.2-rankvisor -o "$OUT.tmp/pause" build/pause/linux/pause.c
strip "$OUT.tmp/pause"

# The Go build cache lives outside the throw-away tree, so a recipe edit need not start cold.
mkdir -p "$CACHE/k8s-node-gocache" _output/local/go
ln -sfn "$CACHE/k8s-node-gocache" _output/local/go/cache
t "make WHAT=\"cmd/kubelet cmd/kubectl\" (about 8 min cold on 2 cores; log: $W/build.log)"
if ! make WHAT="cmd/kubelet cmd/kubectl" >"$W/build.log" 2>&1; then
  tail -40 "$W/build.log" >&2; t "build FAILED"; exit 1
fi
cp _output/bin/kubelet _output/bin/kubectl "$OUT.tmp/"
"$OUT.tmp/kubelet" --version >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
cd "$CACHE" && rm -rf "$W"
[ "${RANKVISOR_KEEP_GO_CACHE:-0}" = 1 ] || rm -rf "$CACHE/k8s-node-gocache"
t "done: $OUT"
echo "$OUT"
