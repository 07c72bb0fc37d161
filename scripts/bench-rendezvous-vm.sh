#!/usr/bin/env bash
# Rendezvous at 65,536 and 98,304 replicas where this machine's own limits cannot hold them: inside
# a qemu guest with a kernel of its own, where root may raise the open-files limit.
#
#   bash scripts/bench-rendezvous-vm.sh                     # SIZES="16384 65536 98304" ROUNDS=1
#   SIZES="98304" ROUNDS=2 VM_MEM=8192 bash scripts/bench-rendezvous-vm.sh
#   VM_TIMEOUT (default 1800 s) bounds the guest: a guest that does not finish is reported, its console shown
#
# Why a guest: the master holds one connection per worker, so it needs N+64 descriptors in one
# process. This container's hard limit is 20,000 and it lacks CAP_SYS_RESOURCE (so does the Docker
# daemon: runc cannot set `--ulimit nofile=200000`). /dev/kvm opens here, but this machine is itself
# a Firecracker guest: a KVM guest crawls (the kernel's decompressor still loops after 100 s; booted
# through PVH it reaches memory set-up in 30 s) and stops on a "KVM internal error ... emulation
# failure" (a lock cmpxchg16b) while the kernel boots, so the guest
# runs under TCG, qemu's software emulation: WALL-CLOCK AND CPU FIGURES FROM THE GUEST ARE NOT COMPARABLE with the
# host's (every instruction is translated; the script prints a 16,384 run beside the host's for the
# ratio). Memory is: the launcher's peak RSS comes from wait4 in the guest, and its data structures
# do not depend on the CPU's speed (only the join burst's handshakes in flight do, printed as
# handshakes_peak).
#
# The guest: Debian's cloud kernel (linux-image-*-cloud-amd64, downloaded with apt and unpacked, no
# modules: loopback needs none, and without the netfilter modules no connection is tracked), an
# initramfs with busybox (static), the lean launcher exactly as images/build.sh ships it, and
# crates/rankvisor-core/examples/bench_rendezvous.rs built static for musl. No disk, no network device.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES="${SIZES:-16384 65536 98304}"
ROUNDS="${ROUNDS:-1}"
VM_MEM="${VM_MEM:-8192}"
VM_CPUS="${VM_CPUS:-2}"
cache=${RANKVISOR_CACHE:-/var/cache/rankvisor}/vm-bench
say() { printf '[bench-rendezvous-vm] %s\n' "$*" >&2; }

apt_install() {
  # Another apt may hold the lock (CI's set-up, a package being installed by hand): wait for it.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
  }
}
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  apt_install "${need[@]}"
fi
if ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  say "/bin/busybox is not static (Debian's busybox-static has a static one): the guest has no libc"
  exit 1
fi

mkdir -p "$cache"
kernel=$(ls "$cache"/vmlinuz-* 2>/dev/null | head -1 || true)
if [ -z "$kernel" ]; then
  # Debian's meta package names the current cloud kernel.
  latest() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}'; }
  pkg=$(latest)
  [ -n "$pkg" ] || { apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1; pkg=$(latest); }
  [ -n "$pkg" ] || { say "apt knows no linux-image-cloud-amd64 (Debian's cloud kernel)"; exit 1; }
  say "downloading the guest's kernel ($pkg)"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb x)
  cp "$tmp"/x/boot/vmlinuz-* "$cache"/
  rm -rf "$tmp"
  kernel=$(ls "$cache"/vmlinuz-* | head -1)
fi

# The launcher as the image ships it, and the bench program static for musl (the guest has no libc).
# shellcheck source=bench/lean-launcher.sh
source scripts/bench/lean-launcher.sh
cargo build --release --quiet --target x86_64-unknown-linux-musl -p rankvisor-core --example bench_rendezvous
bench="$target_dir/x86_64-unknown-linux-musl/release/examples/bench_rendezvous"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,proc,sys,dev,tmp}
cp /bin/busybox "$root/bin/busybox"
cp "$launcher" "$root/bin/rankvisor"
cp "$bench" "$root/bin/bench_rendezvous"
runs=""
for n in $SIZES; do
  for _ in $(seq 1 "$ROUNDS"); do runs="$runs $n"; done
done
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null; mount -t tmpfs tmp /tmp
ip link set lo up
sysctl -qw fs.nr_open=1048576 fs.file-max=4194304 net.core.somaxconn=8192 net.ipv4.tcp_max_syn_backlog=8192
ulimit -Hn 262144; ulimit -n 262144
echo "guest: kernel \$(uname -r), \$(nproc) cpus, \$(awk '/MemTotal/ {print int(\$2/1024)}' /proc/meminfo) MiB, open files \$(ulimit -n)"
for n in $runs; do
  echo "launcher: load=\$(cut -d' ' -f1 /proc/loadavg) \$(BENCH_FLEETS=1 BENCH_LAUNCHER_LOG=/tmp/launcher.log /bin/bench_rendezvous --launcher /bin/rankvisor \$n 2>&1 | tail -1) \$(grep -o 'handshakes_peak=[0-9]*' /tmp/launcher.log | head -1)"
  echo "library:  load=\$(cut -d' ' -f1 /proc/loadavg) \$(BENCH_FLEETS=1 /bin/bench_rendezvous \$n 2>&1 | tail -1)"
done
echo "guest: done"
poweroff -f
EOF
chmod +x "$root/init"
initrd="$root.initrd.gz"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$initrd")
trap 'rm -rf "$root" "$initrd"' EXIT

echo "rendezvous at scale in a qemu guest (TCG: software emulation, times not comparable), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "  host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); guest: $VM_CPUS vCPUs, $VM_MEM MiB, $(basename "$kernel")"
echo "  launcher: $build"
out=$(mktemp)
t0=$SECONDS
timeout "${VM_TIMEOUT:-1800}" qemu-system-x86_64 -M microvm -accel tcg,thread=multi -cpu max -smp "$VM_CPUS" -m "$VM_MEM" \
  -kernel "$kernel" -initrd "$initrd" -append "console=ttyS0 quiet panic=-1" \
  -nographic -no-reboot -nodefaults -serial "file:$out" -monitor none </dev/null >/dev/null 2>&1 || true
grep -E '^(guest|launcher|library):' "$out" | tr -d '\r' || true
echo "  (the guest ran $((SECONDS - t0)) s)"
if ! grep -q '^guest: done' "$out"; then
  say "the guest did not finish; its console:"
  tail -30 "$out" >&2
  rm -f "$out"
  exit 1
fi
rm -f "$out"
