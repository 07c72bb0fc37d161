#!/usr/bin/env bash
# Builds a static rankvisor and the image rankvisor:dev (FROM scratch: no registry, no network).
# Usage: bash images/build.sh [TAG]        (TAG defaults to rankvisor:dev)
# Prints the binary's and the image's sizes; the last line is the image tag.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-rankvisor:dev}
target=x86_64-unknown-linux-gnu

# static-pie glibc: +crt-static with an explicit --target, so proc-macros (host crates) stay dynamic.
# The rendezvous resolves MASTER_ADDR with getaddrinfo: glibc >= 2.34 has the files and dns NSS
# modules built in, so the static binary resolves pod names (Docker's and the cluster's DNS)
# without any libnss_*.so in the image (the linker's warning about getaddrinfo is expected).
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --target "$target" --bin rankvisor >&2
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target_dir/$target/release/rankvisor
if ldd "$bin" 2>&1 | grep -q '=>'; then
  echo "images/build.sh: $bin is not static:" >&2
  ldd "$bin" >&2
  exit 1
fi

# busybox for the demos and the seed's commands (sh, sleep, ...): Debian's static build.
if [ ! -x /bin/busybox ] || ldd /bin/busybox 2>&1 | grep -q '=>'; then
  echo "images/build.sh: installing busybox-static" >&2
  apt-get install -y -qq busybox-static >&2
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/etc" "$ctx/tmp" "$ctx/dev"
chmod 1777 "$ctx/tmp"
cp "$bin" "$ctx/rankvisor"
cp /bin/busybox "$ctx/bin/busybox"
for applet in sh ash sleep cat echo date touch ls mkdir rm kill ps true false env printf test \
  trap wc grep sed head tail id hostname nslookup ping wget; do
  ln -s busybox "$ctx/bin/$applet"
done
# Docker manages /etc/hosts, /etc/resolv.conf and /etc/hostname; these make the root filesystem sane.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$ctx/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ctx/etc/group"
printf 'hosts: files dns\n' >"$ctx/etc/nsswitch.conf"
cp images/Dockerfile "$ctx/Dockerfile"

mib() { awk "BEGIN{printf \"%.2f\", $1/1048576}"; }
# The legacy builder is enough for a FROM scratch image and needs no network at all.
DOCKER_BUILDKIT=0 docker build --network none -q -t "$tag" "$ctx" >/dev/null
# <tag>-slim: rankvisor alone (no shell), for images that only need PID 1 (or to copy it from).
rm -rf "${ctx:?}/bin"/* 
DOCKER_BUILDKIT=0 docker build --network none -q -t "$tag-slim" "$ctx" >/dev/null
bin_bytes=$(stat -c %s "$bin")
echo "images/build.sh: static rankvisor: $bin_bytes bytes ($(mib "$bin_bytes") MiB)" >&2
for t in "$tag" "$tag-slim"; do
  b=$(docker image inspect -f '{{.Size}}' "$t")
  echo "images/build.sh: image $t: $b bytes ($(mib "$b") MiB)" >&2
done
echo "$tag"
