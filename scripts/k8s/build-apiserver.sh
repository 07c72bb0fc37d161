#!/usr/bin/env bash
# Builds a genuine kube-apiserver v1.20.2 from Debian 12's "kubernetes" source package (with Debian's
# Go 1.19 and etcd 3.4) for the Kubernetes node-health tests, and caches it OUTSIDE the repo.
# The cache key is this script's own hash, so editing the recipe rebuilds; a cached binary is a no-op.
# Prints the binary's path on the last line of stdout.
# Usage: bash scripts/k8s/build-apiserver.sh   (env: RANKVISOR_CACHE, default /var/cache/rankvisor)
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
CACHE=${RANKVISOR_CACHE:-/var/cache/rankvisor}
HASH=$(sha256sum "$SELF" | cut -c1-12)
BIN="$CACHE/kube-apiserver-1.20.2-$HASH"
t() { echo "[$(date +%T)] build-apiserver: $*" >&2; }

# Runtime tools the start script needs, also when the binary is cached (a fresh machine may have a
# cached volume but not the packages).
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)

if [ -x "$BIN" ]; then
  if [ ${#need[@]} -gt 0 ]; then
    t "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
  fi
  echo "$BIN"; exit 0
fi

mkdir -p "$CACHE"
# One build at a time per cache (parallel test runs wait for the first one).
exec 9>"$CACHE/.build.lock"
flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

W="$CACHE/build-$HASH"
rm -rf "$W"; mkdir -p "$W/apt/lists/partial" "$W/apt/parts"; cd "$W"
t "apt-get install (go, etcd, rsync, openssl)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go etcd-server etcd-client rsync openssl curl dpkg-dev \
  golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev >/dev/null
# deb-src list derived from the machine's own Debian source entry, kept in a private apt state dir
sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > apt/parts/src.sources
AO=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$W/apt/parts" -o Dir::State::Lists="$W/apt/lists")
t "apt-get update (deb-src)"; apt-get "${AO[@]}" update -q >/dev/null
t "apt-get source kubernetes"; apt-get "${AO[@]}" source -q kubernetes=1.20.5+really1.20.2-1.1+deb12u1 >/dev/null 2>&1
cd kubernetes-1.20.5+really1.20.2
# Go 1.19 needs reflect2 >= 1.0.2 (the vendored 1.0.1 segfaults in map iteration on Go >= 1.18, i.e.
# on the first write): take Debian's newer copies.
for d in github.com/modern-go/reflect2 github.com/json-iterator/go; do
  rm -rf "vendor/$d"; cp -rL "/usr/share/gocode/src/$d" "vendor/$d"
done
t "make WHAT=cmd/kube-apiserver (about 10 min on 2 cores; log: $W/build.log)"
if ! make WHAT=cmd/kube-apiserver >"$W/build.log" 2>&1; then
  tail -40 "$W/build.log" >&2; t "build FAILED"; exit 1
fi
cp _output/bin/kube-apiserver "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
"$BIN" --version >&2
cd "$CACHE" && rm -rf "$W"
t "done: $BIN"
echo "$BIN"
