#!/usr/bin/env bash
# Benchmarks of the core supervisor, side by side with tini and a bare process: launch + exit,
# peak memory, TERM delivery delay, restart latency and fd/RSS stability over 1,000 restarts.
# Prints a table and writes it to target/bench/core.txt. Figures only: nothing here fails on a time.
#
#   bash scripts/bench.sh            # all benchmarks, about ten seconds after the build
#   BENCH_ARGS="--restarts 200" bash scripts/bench.sh   # extra options for scripts/bench/run.py
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out_dir="$root/target/bench"
cache="$out_dir/cache"
mkdir -p "$cache"

say() { printf '[bench] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        say "need root to run: $*"
        return 1
    fi
}

for tool in cargo gcc python3; do
    command -v "$tool" >/dev/null 2>&1 || { say "$tool is required"; exit 1; }
done

say "building rankvisor (release)"
cargo build --release --quiet --bin rankvisor
# Wherever cargo put it (CARGO_TARGET_DIR, a config's build.target-dir, or ./target).
target_dir="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
rankvisor="$target_dir/release/rankvisor"
[ -x "$rankvisor" ] || { say "no binary at $rankvisor"; exit 1; }

if ! command -v tini >/dev/null 2>&1; then
    say "installing tini (Debian package)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tini >/dev/null
fi
tini="$(command -v tini)"

# The probes are compiled here, never committed: rebuilt only when their source changes.
for probe in term_probe stamp_probe; do
    src="$root/scripts/bench/$probe.c"
    if [ ! -x "$cache/$probe" ] || [ "$src" -nt "$cache/$probe" ]; then
        say "compiling $probe"
        gcc -O2 -Wall -Wextra -Werror -o "$cache/$probe" "$src"
    fi
done

# shellcheck disable=SC2086 # BENCH_ARGS is a list of options on purpose
python3 "$root/scripts/bench/run.py" \
    --rankvisor "$rankvisor" \
    --tini "$tini" \
    --probes "$cache" \
    --out "$out_dir/core.txt" \
    ${BENCH_ARGS:-}
