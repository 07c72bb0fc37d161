#!/usr/bin/env bash
# Benchmarks of the PID 1 the image ships, side by side with tini -s, tini-static -s and a bare
# process, in one run: launch + exit (interleaved rounds, medians and spread, the ratio to tini),
# peak RSS and private memory, TERM -> the child's handler, the restart gap, fd/RSS stability over
# restarts, and the image sizes. Prints a table and writes it to target/bench/core.txt. Figures
# only: nothing here fails on a time.
#
#   bash scripts/bench.sh                 # builds the image's binary and the images (images/build.sh)
#   BENCH_ARGS="--rounds 80" bash scripts/bench.sh   # extra options for scripts/bench/run.py
#   RANKVISOR_BIN=path BENCH_BUILD="what it is" bash scripts/bench.sh   # measure another binary
#   BENCH_IMAGE_TAG=rankvisor:mine bash scripts/bench.sh   # the images' tag (default rankvisor:dev)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

say() { printf '[bench] %s\n' "$*" >&2; }

for tool in cargo gcc python3; do
    command -v "$tool" >/dev/null 2>&1 || { say "$tool is required"; exit 1; }
done

# The lean binary exactly as the image ships it; images/build.sh says where it is and how it was built.
target_dir="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
out_dir="$target_dir/bench"
cache="$out_dir/cache"
mkdir -p "$cache"
images=""
if [ -z "${RANKVISOR_BIN:-}" ]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        say "building the image's binary and the images (images/build.sh)"
        tag=$(bash images/build.sh "${BENCH_IMAGE_TAG:-rankvisor:dev}")
        images="$tag,$tag-slim"
    else
        say "no Docker engine: building the image's binary only (images/build.sh --binary-only)"
        bash images/build.sh --binary-only >/dev/null
    fi
    rankvisor="$target_dir/image/rankvisor"
    build="$(cat "$target_dir/image/build.txt")"
else
    rankvisor="$RANKVISOR_BIN"
    build="${BENCH_BUILD:-$RANKVISOR_BIN (as given)}"
fi
[ -x "$rankvisor" ] || { say "no binary at $rankvisor"; exit 1; }

# Debian's tini package ships both: tini (dynamic) and tini-static.
if ! command -v tini >/dev/null 2>&1 || ! command -v tini-static >/dev/null 2>&1; then
    say "installing tini (Debian package: tini and tini-static)"
    if [ "$(id -u)" -ne 0 ]; then say "need root to apt-get install tini"; exit 1; fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tini >/dev/null
fi

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
    --build "$build" \
    --tini "$(command -v tini)" \
    --tini-static "$(command -v tini-static)" \
    --images "$images" \
    --probes "$cache" \
    --out "$out_dir/core.txt" \
    ${BENCH_ARGS:-}
