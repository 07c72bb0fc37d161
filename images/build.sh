#!/usr/bin/env bash
# Builds the lean static rankvisor (the PID 1 build: the root package alone, no dry run, no YAML) and the images
# rankvisor:dev and rankvisor:dev-slim (FROM scratch: no registry, no network).
# Usage: bash images/build.sh [TAG]          (TAG defaults to rankvisor:dev)
#        bash images/build.sh --binary-only  (the binary alone, no Docker needed)
#        bash images/build.sh --wheel DIR    (the binary, and the Python wheel that carries it in DIR)
# The wheel (pyproject.toml: maturin's binary bindings) is built by maturin (RANKVISOR_MATURIN, else
# the one scripts/setup-maturin.sh installs) with this script's cargo options, so cargo finds the
# binary just built up to date and the wheel carries the same bytes as the image (checked below).
# RANKVISOR_LINK picks the link mode (docs/building.md; the measurements are in docs/benchmarks.md):
#   musl-static (default)  x86_64-unknown-linux-musl, static, not PIE
#   musl-static-pie        x86_64-unknown-linux-musl, static-pie (the target's default)
#   glibc-static           x86_64-unknown-linux-gnu, static, not PIE
#   glibc-static-pie       x86_64-unknown-linux-gnu, static-pie (the image's build before)
# RANKVISOR_STD picks the standard library it links:
#   rebuilt (default)      std compiled from source with the binary (cargo -Z build-std, on this
#                          stable toolchain through RUSTC_BOOTSTRAP=1; rustup's rust-src component):
#                          without the backtrace symbolizer (std's `backtrace` feature off) and, like
#                          every crate, without unwind tables (-C force-unwind-tables=no); panic =
#                          "abort" as in the release profile, so the panic hook still runs
#   prebuilt               the toolchain's own std (stable only; about 690 KB larger: its unwind
#                          tables and gimli/addr2line, which print a panic's backtrace)
# RANKVISOR_FEATURES adds cargo features to the lean build (tests: `failpoints`); such a binary is
# written to <target dir>/image/rankvisor+<features> and never goes into an image.
# The binary is copied to <target dir>/image/rankvisor and how it was built to
# <target dir>/image/build.txt (scripts/bench.sh names the build it measures from there).
# Prints the binary's and the images' sizes; the last line is the image tag.
set -euo pipefail
cd "$(dirname "$0")/.."
binary_only=0
wheel_dir=""
if [ "${1:-}" = --binary-only ]; then
  binary_only=1
  shift
elif [ "${1:-}" = --wheel ]; then
  [ -n "${2:-}" ] || { echo "images/build.sh: --wheel needs the directory to write the wheel to" >&2; exit 2; }
  binary_only=1
  wheel_dir=$2
  shift 2
fi
tag=${1:-rankvisor:dev}
link=${RANKVISOR_LINK:-musl-static}
std=${RANKVISOR_STD:-rebuilt}
features=${RANKVISOR_FEATURES:-}
feature_flags=()
name=rankvisor
if [ -n "$features" ]; then
  case "$features" in
    *[!a-z0-9,_-]*) echo "images/build.sh: RANKVISOR_FEATURES=$features: expected cargo feature names separated by commas" >&2; exit 2 ;;
  esac
  feature_flags=(--features "$features")
  name="rankvisor+${features//,/+}"
  if [ "$binary_only" != 1 ] || [ -n "$wheel_dir" ]; then
    echo "images/build.sh: RANKVISOR_FEATURES=$features builds a test binary: only with --binary-only, never into an image or a wheel" >&2
    exit 2
  fi
fi

# `-p rankvisor` alone: the root package is the PID 1 and nothing else, so the dry run's YAML parser
# and tokio's process/signal drivers (a socketpair, a dup and an epoll registration in every runtime),
# which the rankvisor-dryrun member turns on, stay out (cargo unifies features only across the
# packages one command builds). The link mode goes to the final crate only (`cargo rustc -- ...`): with the
# release profile's fat LTO every crate's code is generated there anyway, and the dependencies'
# build is shared between the modes. +crt-static is the musl target's default; glibc needs it in
# RUSTFLAGS (it selects the static libc everywhere), with an explicit --target so that proc-macros
# and build scripts (host crates) stay dynamic.
rustflags=""
final=""
case "$link" in
  musl-static) target=x86_64-unknown-linux-musl; final="-C relocation-model=static" ;;
  musl-static-pie) target=x86_64-unknown-linux-musl ;;
  glibc-static) target=x86_64-unknown-linux-gnu; rustflags="-C target-feature=+crt-static"; final="-C relocation-model=static" ;;
  glibc-static-pie) target=x86_64-unknown-linux-gnu; rustflags="-C target-feature=+crt-static" ;;
  *) echo "images/build.sh: RANKVISOR_LINK=$link: expected musl-static, musl-static-pie, glibc-static or glibc-static-pie" >&2; exit 2 ;;
esac
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  # A fresh machine has only the host's standard library: fetch the target's (rust-std, ~40 MB).
  echo "images/build.sh: installing the Rust target $target (rustup target add)" >&2
  if ! rustup target add "$target" >&2; then
    echo "images/build.sh: the Rust target $target is not installed and \`rustup target add $target\` failed" >&2
    exit 1
  fi
fi
# PID 1 never unwinds (panic = "abort"; its panic hook kills the child's group and writes the
# termination log, then aborts), so unwind tables (.eh_frame, 340 KB) are dead weight, and so is the
# symbolizer that std's default hook uses for RUST_BACKTRACE (gimli, addr2line, miniz: 350 KB).
# Both sit in the prebuilt std; taking them out means compiling std with the binary. Not
# panic=immediate-abort: that strategy skips the panic hook.
std_flags=()
case "$std" in
  rebuilt)
    if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
      echo "images/build.sh: installing rust-src (std's source, for -Z build-std)" >&2
      if ! rustup component add rust-src >&2; then
        echo "images/build.sh: RANKVISOR_STD=rebuilt needs rustup's rust-src component and \`rustup component add rust-src\` failed (RANKVISOR_STD=prebuilt builds without it)" >&2
        exit 1
      fi
    fi
    # -Z flags on the stable toolchain: RUSTC_BOOTSTRAP=1 (for this cargo only). An empty
    # build-std-features drops cargo's default `backtrace` and `panic-unwind`.
    export RUSTC_BOOTSTRAP=1
    std_flags=(-Z build-std=std,panic_abort -Z build-std-features=)
    rustflags="$rustflags -C force-unwind-tables=no"
    ;;
  prebuilt) ;;
  *) echo "images/build.sh: RANKVISOR_STD=$std: expected rebuilt or prebuilt" >&2; exit 2 ;;
esac
case "$target" in
  *musl)
    # ring's C and assembly are compiled for musl by musl-gcc (Debian's musl-tools); Rust links its
    # own bundled musl (self-contained crt objects and libc.a).
    if ! command -v musl-gcc >/dev/null 2>&1; then
      echo "images/build.sh: installing musl-tools (musl-gcc, for ring's C code)" >&2
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq musl-tools >&2
    fi
    ;;
  *gnu)
    # The rendezvous resolves MASTER_ADDR with getaddrinfo: glibc >= 2.34 has the files and dns
    # NSS modules built in, so the static binary resolves pod names without any libnss_*.so in the
    # image (the linker's warning about getaddrinfo is expected).
    ;;
esac
# shellcheck disable=SC2086 # $final is a list of options on purpose
RUSTFLAGS="${RUSTFLAGS:-} $rustflags" \
  cargo rustc --release --locked -p rankvisor --target "$target" --bin rankvisor "${feature_flags[@]}" "${std_flags[@]}" -- $final >&2
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target_dir/$target/release/rankvisor
if ldd "$bin" 2>&1 | grep -q '=>'; then
  echo "images/build.sh: $bin is not static:" >&2
  ldd "$bin" >&2
  exit 1
fi
mkdir -p "$target_dir/image"
cp "$bin" "$target_dir/image/$name"
echo "lean $link, std $std: ${RUSTC_BOOTSTRAP:+RUSTC_BOOTSTRAP=1 }cargo rustc --release -p rankvisor --target $target --bin rankvisor ${feature_flags[*]}${features:+ }${std_flags[*]}${std_flags:+ }-- $final${rustflags:+ (RUSTFLAGS=$rustflags)}, $(stat -c %s "$bin") bytes" \
  >"$target_dir/image/$name.build.txt"
[ "$name" = rankvisor ] && cp "$target_dir/image/$name.build.txt" "$target_dir/image/build.txt"
mib() { awk "BEGIN{printf \"%.2f\", $1/1048576}"; }
bin_bytes=$(stat -c %s "$bin")
echo "images/build.sh: static rankvisor ($link, std $std${features:+, features $features}): $bin_bytes bytes ($(mib "$bin_bytes") MiB): $target_dir/image/$name" >&2
if [ -n "$wheel_dir" ]; then
  # The same cargo options as above (maturin runs `cargo rustc --release --target T --bin rankvisor`
  # with them, adding nothing for a binary), so cargo finds the binary fresh and does not rebuild.
  # Tags: a static binary needs no libc, so one wheel serves glibc (manylinux) and musl systems.
  case "$target" in
    *musl) tags=(--compatibility manylinux2014 --compatibility musllinux_1_2) ;;
    *) tags=(--compatibility manylinux2014) ;;
  esac
  maturin=${RANKVISOR_MATURIN:-$(bash scripts/setup-maturin.sh | tail -n 1)}
  # Into an empty directory of its own: the one wheel there is this build's.
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  # shellcheck disable=SC2086 # $final is a list of options on purpose
  RUSTFLAGS="${RUSTFLAGS:-} $rustflags" \
    "$maturin" build --release --locked --target "$target" "${tags[@]}" --out "$out" "${std_flags[@]}" -- $final >&2
  wheels=("$out"/rankvisor-*.whl)
  [ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || { echo "images/build.sh: expected one rankvisor wheel from maturin, found: ${wheels[*]}" >&2; exit 1; }
  version=$(basename "${wheels[0]}" | cut -d- -f2)
  mkdir -p "$wheel_dir"
  wheel=$wheel_dir/$(basename "${wheels[0]}")
  mv "${wheels[0]}" "$wheel"
  # The wheel's binary must be the image's, byte for byte: a maturin that added a flag would
  # rebuild it differently.
  python3 - "$wheel" "$target_dir/image/rankvisor" "rankvisor-$version.data/scripts/rankvisor" <<'PY' >&2
import sys, zipfile
wheel, binary, member = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    if member not in names:
        sys.exit(f"images/build.sh: {wheel} has no {member}: {names}")
    if z.read(member) != open(binary, "rb").read():
        sys.exit(f"images/build.sh: {member} in {wheel} is not the image's binary {binary}")
    print(f"images/build.sh: {wheel}: carries {binary} ({z.getinfo(member).file_size} bytes, "
          f"{z.getinfo(member).compress_size} compressed)")
PY
  echo "$wheel"
  exit 0
fi
if [ "$binary_only" = 1 ]; then
  echo "$target_dir/image/$name"
  exit 0
fi

# busybox for the demos and the seed's commands (sh, sleep, ...): Debian's static build.
if [ ! -x /bin/busybox ] || ldd /bin/busybox 2>&1 | grep -q '=>'; then
  echo "images/build.sh: installing busybox-static" >&2
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq busybox-static >&2
fi

# The stack reader (rankvisor-stacks: py-spy as a library) for the dev image: a binary of its own
# beside busybox in /bin, where rankvisor finds it on PATH; the slim image leaves /bin out, so it
# stays rankvisor alone (its /stacks has the /proc facts only). Built static for the same target
# with the toolchain's own std; a build that is not static is left out (a FROM scratch image could
# not run it).
cargo build --release --locked -p rankvisor-stacks --target "$target" >&2
reader=$target_dir/$target/release/rankvisor-stacks
if ldd "$reader" 2>&1 | grep -q '=>'; then
  echo "images/build.sh: $reader is not static: the dev image has no stack reader" >&2
  reader=""
else
  echo "images/build.sh: rankvisor-stacks: $(stat -c %s "$reader") bytes ($(mib "$(stat -c %s "$reader")") MiB)" >&2
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/etc" "$ctx/tmp" "$ctx/dev"
chmod 1777 "$ctx/tmp"
cp "$bin" "$ctx/rankvisor"
cp /bin/busybox "$ctx/bin/busybox"
[ -n "$reader" ] && cp "$reader" "$ctx/bin/rankvisor-stacks"
for applet in sh ash sleep cat echo date touch ls mkdir rm kill ps true false env printf test \
  trap wc grep sed head tail id hostname nslookup ping wget; do
  ln -s busybox "$ctx/bin/$applet"
done
# Docker manages /etc/hosts, /etc/resolv.conf and /etc/hostname; these make the root filesystem sane.
# (nsswitch.conf is read by glibc's getaddrinfo; musl has no NSS and ignores it.)
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$ctx/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ctx/etc/group"
printf 'hosts: files dns\n' >"$ctx/etc/nsswitch.conf"
cp images/Dockerfile "$ctx/Dockerfile"

# The legacy builder is enough for a FROM scratch image and needs no network at all.
DOCKER_BUILDKIT=0 docker build --network none -q -t "$tag" "$ctx" >/dev/null
# <tag>-slim: rankvisor alone (no shell), for images that only need PID 1 (or to copy it from).
rm -rf "${ctx:?}/bin"/*
DOCKER_BUILDKIT=0 docker build --network none -q -t "$tag-slim" "$ctx" >/dev/null
for t in "$tag" "$tag-slim"; do
  b=$(docker image inspect -f '{{.Size}}' "$t")
  echo "images/build.sh: image $t: $b bytes ($(mib "$b") MiB)" >&2
done
echo "$tag"
