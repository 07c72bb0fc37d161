#!/usr/bin/env bash
# Runs src/arena.rs's unit tests under Miri with strict provenance: PID 1's allocator is the one
# module of the binary with `unsafe` pointer arithmetic. The file is self-contained (std only), so
# it is built as a crate of its own under <target dir>/miri-arena instead of the whole binary's
# dependency tree under Miri. Needs a nightly toolchain with the miri and rust-src components
# (`rustup component add miri rust-src --toolchain nightly`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
crate="$target_dir/miri-arena"
mkdir -p "$crate/src"
cat >"$crate/Cargo.toml" <<'TOML'
[package]
name = "miri_arena"
version = "0.0.0"
edition = "2021"
publish = false

[lib]
path = "src/lib.rs"

[workspace]
TOML
cp "$root/src/arena.rs" "$crate/src/lib.rs"
cd "$crate"
MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance}" cargo +nightly miri test "$@"
